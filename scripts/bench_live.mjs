// The real Pi appending to a session while scripts/bench watches the mount (bench_live.py).
//
//   node scripts/bench_live.mjs FILE COUNT GAP_MS
//
// Opens FILE with Pi's SessionManager and appends COUNT user messages, GAP_MS apart, each a
// child of the previous (as a running Pi does). After each append it prints one JSON line,
// {"id": ..., "t": <Unix time in ms, sub-ms precision>}, taken right after appendMessage
// returned, so the reader can time when the entry shows through the mount.

import { performance } from "node:perf_hooks";
import { SessionManager } from "../node_modules/@earendil-works/pi-coding-agent/dist/core/session-manager.js";

const [file, count, gap] = [process.argv[2], Number(process.argv[3]), Number(process.argv[4])];
const sm = SessionManager.open(file);
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
for (let i = 0; i < count; i++) {
	await sleep(gap);
	const id = sm.appendMessage({
		role: "user",
		content: [{ type: "text", text: `live ${i}` }],
		timestamp: Date.now(),
	});
	const t = performance.timeOrigin + performance.now();
	process.stdout.write(`${JSON.stringify({ id, t })}\n`);
}
