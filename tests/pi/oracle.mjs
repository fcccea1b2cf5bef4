// The oracle of what the real Pi (npm @earendil-works/pi-coding-agent, pinned in package.json)
// sees in a session file. Used by the Python interop tests; run `npm install` in the repo first.
//
//   node tests/pi/oracle.mjs FILE
//       Prints one JSON object: {leafId, name, header, entries, leaves, branches, userTexts,
//       labels, tree}, or {"error": "..."} when Pi cannot open FILE (exit status 0 either way).
//   node tests/pi/oracle.mjs --batch LISTFILE
//       For each path in LISTFILE (one a line), what Pi's index holds (see indexView): one JSON
//       array, one file per line, {"error": "..."} for a file Pi cannot open. One node process
//       for hundreds of files (the fuzz test).
//   node tests/pi/oracle.mjs --usage FILE
//       What Pi 1.6 counts of FILE's usage, with its own code: the totals its footer shows
//       (AgentSession.getSessionStats: the same loop over SessionManager.getEntries(), summed
//       by Pi's addUsageToTotals) and the cost breakdown by model (getUsageCostBreakdown):
//       {assistantMessages, tokens: {input, output, cacheRead, cacheWrite, total}, cost,
//       breakdown: [{key, cost, tokens}]}.
//   node tests/pi/oracle.mjs --append FILE PARENT_ID TEXT [COUNT]
//       Like Pi would: branch(PARENT_ID), then COUNT (default 1) user messages, each a child of
//       the previous. Prints the new ids as a JSON list.
//
// FILE should be a temp copy: Pi may rewrite it (v1/v2 migration, a missing final newline).
//
// Pi itself has no cycle guard: getBranch() on an entry whose ancestry loops (a self-parent, a
// cycle) and getTree() on a tree where duplicate ids close a loop both run until memory is gone.
// Where Pi would hang, the oracle says so instead: branches[leaf] = null and the leaf in
// `hangs`, or {"error": "pi-hangs: ..."} when getTree() itself would loop.

// The package's top-level entry needs Node 22; this module works under Node 20.
import { readFileSync } from "node:fs";
import { SessionManager } from "../../node_modules/@earendil-works/pi-coding-agent/dist/core/session-manager.js";
import {
	addUsageToTotals,
	createUsageTotals,
	getUsageCostBreakdown,
} from "../../node_modules/@earendil-works/pi-coding-agent/dist/core/usage-totals.js";

function userText(content) {
	if (typeof content === "string") return content;
	if (!Array.isArray(content)) return "";
	return content
		.filter((b) => b && b.type === "text")
		.map((b) => b.text)
		.join("\n\n");
}

// Would getTree() loop? Its nodes are keyed by id (a later duplicate wins) and every entry is
// attached under its parent's node, so only duplicate ids can close a loop reachable from a root.
function treeLoops(entries) {
	const ids = new Set(entries.map((e) => e.id));
	if (ids.size === entries.length) return null;
	const kids = new Map(); // id -> child ids, as getTree() links them
	const roots = [];
	for (const e of entries) {
		if (e.parentId === null || e.parentId === e.id || !ids.has(e.parentId)) roots.push(e.id);
		else if (kids.has(e.parentId)) kids.get(e.parentId).push(e.id);
		else kids.set(e.parentId, [e.id]);
	}
	const state = new Map(); // id -> 1 on the DFS path, 2 done
	for (const root of roots) {
		const stack = [[root, 0]];
		while (stack.length) {
			const top = stack[stack.length - 1];
			const [id, i] = top;
			if (i === 0) state.set(id, 1);
			const list = kids.get(id) ?? [];
			if (i >= list.length) {
				state.set(id, 2);
				stack.pop();
				continue;
			}
			const next = list[i]; // may be undefined: an entry without id is a node too
			top[1]++;
			if (state.get(next) === 1) return next;
			if (state.get(next) !== 2) stack.push([next, 0]);
		}
	}
	return null;
}

// Would getBranch(id) loop? Walk the ancestry as Pi does (getEntry, parentId) with a guard.
function branchLoops(sm, id) {
	const seen = new Set();
	for (let e = sm.getEntry(id); e; e = e.parentId ? sm.getEntry(e.parentId) : undefined) {
		if (seen.has(e.id)) return true;
		seen.add(e.id);
	}
	return false;
}

// getSessionName() throws on a session_info whose name is no string (name.trim is not a
// function): say so, and describe the rest of the file.
function sessionName(sm) {
	try {
		return sm.getSessionName() ?? null;
	} catch (err) {
		return { error: String(err?.message ?? err) };
	}
}

function describe(file) {
	const sm = SessionManager.open(file);
	const entries = sm.getEntries();
	const loop = treeLoops(entries);
	if (loop !== null) return { error: `pi-hangs: getTree() loops through duplicate id ${loop}` };
	const roots = sm.getTree();

	// Pre-order walk of getTree(), iterative (chains of 20,000 entries are fine).
	const tree = [];
	const leafSet = new Set();
	const stack = roots.map((node) => [node, 0]).reverse();
	while (stack.length) {
		const [node, depth] = stack.pop();
		tree.push({ id: node.entry.id, depth });
		if (node.children.length === 0) leafSet.add(node.entry);
		for (let i = node.children.length - 1; i >= 0; i--) stack.push([node.children[i], depth + 1]);
	}
	// Leaves in file order, each id once (with duplicate ids the tree holds the later entry).
	const leaves = [...new Set(entries.filter((e) => leafSet.has(e)).map((e) => e.id))];

	const branches = {};
	const hangs = [];
	for (const id of leaves) {
		if (branchLoops(sm, id)) {
			branches[id] = null;
			hangs.push(id);
		} else {
			branches[id] = sm.getBranch(id).map((e) => e.id);
		}
	}

	const userTexts = {};
	const labels = {};
	for (const e of entries) {
		if (e.type === "message" && e.message?.role === "user") userTexts[e.id] = userText(e.message.content);
		const label = sm.getLabel(e.id);
		if (label !== undefined) labels[e.id] = label;
	}

	return {
		leafId: sm.getLeafId(),
		name: sessionName(sm),
		header: sm.getHeader(),
		entries: entries.map((e) => ({
			id: e.id ?? null,
			parentId: e.parentId ?? null,
			type: e.type ?? null,
			role: e.type === "message" ? (e.message?.role ?? null) : null,
			timestamp: e.timestamp ?? null,
		})),
		leaves,
		branches,
		...(hangs.length ? { hangs } : {}),
		userTexts,
		labels,
		tree,
	};
}

// An id as Pi's maps key it: a non-empty string, or anything else (undefined for an array, a
// number, an object without id). Files with such keys are compared more loosely.
const goodId = (id) => typeof id === "string" && id !== "";
// Ids as printed: a non-string id (a number, an object nested 3000 deep) only as its type.
const shown = (id) => (typeof id === "string" ? id : id === null ? null : { notString: typeof id });
const isConversation = (e) =>
	["message", "custom_message", "compaction", "branch_summary"].includes(e?.type);

// What getEntry/getBranch/getLeafId see (the byId index, a later duplicate winning), with the
// guard Pi lacks: `loops` lists every id whose ancestry walk would not end.
function indexView(file) {
	const sm = SessionManager.open(file);
	const entries = sm.getEntries();
	const winners = [...new Map(entries.map((e) => [e?.id, e])).values()];
	const state = new Map(); // id -> true: the walk loops, false: it ends
	for (const start of winners) {
		const walk = [];
		const onWalk = new Set();
		let verdict = false;
		for (let e = start; e; e = e.parentId ? sm.getEntry(e.parentId) : undefined) {
			if (state.has(e.id)) {
				verdict = state.get(e.id);
				break;
			}
			if (onWalk.has(e.id)) {
				verdict = true;
				break;
			}
			onWalk.add(e.id);
			walk.push(e.id);
		}
		for (const id of walk) state.set(id, verdict);
	}
	const parents = new Set(winners.filter((e) => e.parentId !== e.id).map((e) => e.parentId));
	const loops = winners.filter((e) => state.get(e.id)).map((e) => shown(e.id));
	const branches = {};
	if (winners.length <= 2000 && winners.every((e) => goodId(e?.id))) {
		for (const e of winners) {
			if (!state.get(e.id)) branches[e.id] = sm.getBranch(e.id).map((x) => x.id);
		}
	}
	const loop = treeLoops(entries);
	let treeLeaves = null;
	if (loop === null) {
		const leafSet = new Set();
		const stack = [...sm.getTree()];
		while (stack.length) {
			const node = stack.pop();
			if (node.children.length === 0) leafSet.add(node.entry.id);
			stack.push(...node.children);
		}
		treeLeaves = [...leafSet].map(shown);
	}
	const leafId = sm.getLeafId();
	return {
		leafId: shown(leafId),
		entries: entries.map((e) => ({
			id: shown(e?.id),
			good: e !== null && typeof e === "object" && goodId(e.id), // v1 arrays get ids too
			type: typeof e?.type === "string" ? e.type : null,
			conversation: isConversation(e),
		})),
		indexLeaves: winners.filter((e) => !parents.has(e.id)).map((e) => shown(e.id)),
		loops,
		branches,
		treeLeaves,
		...(loop === null ? {} : { treeLoops: shown(loop) }),
	};
}

function batch(listFile) {
	const files = readFileSync(listFile, "utf8").split("\n").filter((f) => f);
	const out = [];
	for (const file of files) {
		try {
			out.push(JSON.stringify(indexView(file)));
		} catch (err) {
			out.push(JSON.stringify({ error: String(err?.message ?? err) }));
		}
	}
	return out;
}

// AgentSession.getSessionStats() of Pi 1.6 without an agent: its loop over the entries,
// as dist/core/agent-session.js has it, with Pi's own totals.
function usageOf(file) {
	const entries = SessionManager.open(file).getEntries();
	const totals = createUsageTotals();
	let assistantMessages = 0;
	for (const entry of entries) {
		if (entry.type === "usage") addUsageToTotals(totals, entry.usage);
		else if ((entry.type === "branch_summary" || entry.type === "compaction") && entry.usage)
			addUsageToTotals(totals, entry.usage);
		if (entry.type !== "message") continue;
		if (entry.message.role === "toolResult" && entry.message.usage)
			addUsageToTotals(totals, entry.message.usage);
		else if (entry.message.role === "assistant") {
			assistantMessages++;
			addUsageToTotals(totals, entry.message.usage);
		}
	}
	const { input, output, cacheRead, cacheWrite, cost } = totals;
	const total = input + output + cacheRead + cacheWrite;
	const tokens = { input, output, cacheRead, cacheWrite, total };
	return { assistantMessages, tokens, cost, breakdown: getUsageCostBreakdown(entries) };
}

function append(file, parentId, text, count = 1) {
	const sm = SessionManager.open(file);
	sm.branch(parentId);
	const ids = [];
	for (let i = 0; i < count; i++) {
		ids.push(
			sm.appendMessage({
				role: "user",
				content: [{ type: "text", text: text + (i > 0 ? ` ${i}` : "") }],
				timestamp: Date.now(),
			}),
		);
	}
	return ids;
}

const args = process.argv.slice(2);
const usage =
	"usage: oracle.mjs FILE | oracle.mjs --batch LISTFILE | oracle.mjs --usage FILE | oracle.mjs --append FILE PARENT_ID TEXT [COUNT]";
let result;
try {
	if (args[0] === "--batch") {
		if (args.length !== 2) throw new Error(usage);
		result = batch(args[1]);
	} else if (args[0] === "--usage") {
		if (args.length !== 2) throw new Error(usage);
		result = usageOf(args[1]);
	} else if (args[0] === "--append") {
		if (args.length < 4 || args.length > 5) throw new Error(usage);
		result = append(args[1], args[2], args[3], args[4] === undefined ? 1 : Number(args[4]));
	} else {
		if (args.length !== 1) throw new Error(usage);
		result = describe(args[0]);
	}
} catch (err) {
	result = { error: String(err?.message ?? err) };
	if (result.error === usage) process.exitCode = 2;
}
// No process.exit(): let a large write to a pipe drain.
if (args[0] === "--batch" && Array.isArray(result)) {
	process.stdout.write(`[\n${result.join(",\n")}\n]\n`); // one JSON document, a file a line
} else {
	process.stdout.write(`${JSON.stringify(result)}\n`);
}
