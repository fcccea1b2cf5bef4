// Times the real Pi SessionManager on one session file: SessionManager.open(file) + getTree(),
// measured inside Node with performance.now(). Used by scripts/bench (the baseline of "first
// listing of a big session"); run `npm ci` in the repo first.
//
//   node scripts/bench_pi.mjs FILE [SESSION_MANAGER_JS]
//
// Prints one JSON object: {import_ms, open_ms, tree_ms, pi_ms (open + getTree), entries,
// roots, leaves, rss_bytes, heap_bytes}. FILE should be a copy: Pi appends a newline to a
// file whose last line lacks one. SESSION_MANAGER_JS defaults to the pinned package in
// node_modules (the package's top-level entry needs Node 22; this module works under Node 20).

import { fileURLToPath, pathToFileURL } from "node:url";
import { performance } from "node:perf_hooks";

const args = process.argv.slice(2);
if (args.length < 1 || args.length > 2) {
	process.stderr.write("usage: bench_pi.mjs FILE [SESSION_MANAGER_JS]\n");
	process.exit(2);
}
const file = args[0];
const smPath =
	args[1] ??
	fileURLToPath(
		new URL(
			"../node_modules/@earendil-works/pi-coding-agent/dist/core/session-manager.js",
			import.meta.url,
		),
	);

const t0 = performance.now();
const { SessionManager } = await import(pathToFileURL(smPath).href);
const t1 = performance.now();
const sm = SessionManager.open(file);
const t2 = performance.now();
const roots = sm.getTree();
const t3 = performance.now();

// Count what was built (after the clock stopped), so the work cannot be optimised away.
let leaves = 0;
let nodes = 0;
const stack = [...roots];
while (stack.length) {
	const node = stack.pop();
	nodes++;
	if (node.children.length === 0) leaves++;
	for (const c of node.children) stack.push(c);
}
const mem = process.memoryUsage();
process.stdout.write(
	`${JSON.stringify({
		import_ms: t1 - t0,
		open_ms: t2 - t1,
		tree_ms: t3 - t2,
		pi_ms: t3 - t1,
		entries: sm.getEntries().length,
		nodes,
		roots: roots.length,
		leaves,
		rss_bytes: mem.rss,
		heap_bytes: mem.heapUsed,
	})}\n`,
);
