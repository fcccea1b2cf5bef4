// Writes the example sessions shipped in pisessfs/examples/sessions/ (used by `pisessfs demo`).
//
// Every line is written by the real Pi SessionManager (npm @earendil-works/pi-coding-agent,
// pinned in package.json), driven the way Pi drives it: nothing here writes JSONL by hand.
// To make the output reproducible and realistic, three things are faked before Pi runs:
//   - the clock (Date): a monotonic clock that we advance like a person and a model would;
//   - randomness (crypto.randomUUID, crypto.getRandomValues): a seeded generator, so entry ids
//     and session UUIDs are the same on every run;
//   - the location: Pi believes it writes to /home/ana/.pi/agent/sessions/ (so headers, file
//     names and the fork's parentSession read as on Ana's machine); a small fs shim redirects
//     that prefix to pisessfs/examples/.
// Run: scripts/make-examples   (or: node scripts/make-examples.mjs)

import { execFileSync } from "node:child_process";
import crypto from "node:crypto";
import fs from "node:fs";
import { syncBuiltinESMExports } from "node:module";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import zlib from "node:zlib";

const REPO = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const OUT = path.join(REPO, "pisessfs", "examples"); // real folder
const AGENT = "/home/ana/.pi/agent"; // what Pi is told

// ---------------------------------------------------------------- determinism shims
let seed = 0x5eed1e55;
function rand() {
	// mulberry32
	seed = (seed + 0x6d2b79f5) | 0;
	let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
	t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
	return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
}
function randomBytes(n) {
	return Uint8Array.from({ length: n }, () => Math.floor(rand() * 256));
}
crypto.randomUUID = () => {
	const b = randomBytes(16);
	b[6] = (b[6] & 0x0f) | 0x40;
	b[8] = (b[8] & 0x3f) | 0x80;
	const h = Buffer.from(b).toString("hex");
	return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`;
};
globalThis.crypto.getRandomValues = (arr) => {
	arr.set(randomBytes(arr.length));
	return arr;
};

const RealDate = Date;
let now = 0; // ms; set per session
globalThis.Date = class extends RealDate {
	constructor(...args) {
		super(...(args.length ? args : [now]));
	}
	static now() {
		return now;
	}
};
/** Let `seconds` (plus up to 40% jitter) pass; every entry gets a later time than the last. */
function wait(seconds) {
	now += Math.round(seconds * 1000 * (1 + 0.4 * rand())) + 1;
}

const mapPath = (p) => (typeof p === "string" && (p === AGENT || p.startsWith(`${AGENT}/`)) ? OUT + p.slice(AGENT.length) : p);
for (const name of ["existsSync", "mkdirSync", "openSync", "appendFileSync", "writeFileSync", "readFileSync", "statSync", "readdirSync"]) {
	const real = fs[name];
	fs[name] = (p, ...rest) => real(mapPath(p), ...rest);
}
syncBuiltinESMExports(); // make `import { openSync } from "fs"` in Pi see the shims

fs.rmSync(path.join(OUT, "sessions"), { recursive: true, force: true });
fs.mkdirSync(path.join(OUT, "sessions"), { recursive: true });

// Pi is imported only now, after the shims are in place.
const PI = "../node_modules/@earendil-works/pi-coding-agent/dist";
const { SessionManager, getDefaultSessionDir } = await import(`${PI}/core/session-manager.js`);
const { createCodingToolDefinitions } = await import(`${PI}/core/tools/index.js`);
const { buildSystemPromptSections } = await import(`${PI}/core/system-prompt.js`);
const { applyEditsToNormalizedContent, generateEditDiff } = await import(`${PI}/core/tools/edit-diff.js`);
const { estimateProjectedContextTokens } = await import(`${PI}/core/compaction/index.js`);
const { getReadmePath } = await import(`${PI}/config.js`);
const { toToolDeclaration } = await import("@earendil-works/pi-ai");

// ---------------------------------------------------------------- models
const MODELS = {
	sonnet: { api: "anthropic-messages", provider: "anthropic", model: "claude-sonnet-4-5", price: [3, 15, 0.3, 3.75] },
	haiku: { api: "anthropic-messages", provider: "anthropic", model: "claude-haiku-4-5", price: [1, 5, 0.1, 1.25] },
	gpt: { api: "openai-responses", provider: "openai", model: "gpt-5.2", price: [1.75, 14, 0.175, 0] },
};
const ALNUM = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
const token = (n) => Array.from({ length: n }, () => ALNUM[Math.floor(rand() * ALNUM.length)]).join("");
const signature = () => Buffer.from(randomBytes(72)).toString("base64");

// ---------------------------------------------------------------- the PNG a user attaches
function png(width, height, pixel) {
	const crcTable = Array.from({ length: 256 }, (_, n) => {
		let c = n;
		for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
		return c >>> 0;
	});
	const crc = (buf) => {
		let c = 0xffffffff;
		for (const b of buf) c = crcTable[(c ^ b) & 0xff] ^ (c >>> 8);
		return (c ^ 0xffffffff) >>> 0;
	};
	const chunk = (type, data) => {
		const td = Buffer.concat([Buffer.from(type, "ascii"), data]);
		const out = Buffer.alloc(td.length + 8);
		out.writeUInt32BE(data.length, 0);
		td.copy(out, 4);
		out.writeUInt32BE(crc(td), td.length + 4);
		return out;
	};
	const ihdr = Buffer.alloc(13);
	ihdr.writeUInt32BE(width, 0);
	ihdr.writeUInt32BE(height, 4);
	ihdr.set([8, 2, 0, 0, 0], 8); // 8-bit RGB
	const raw = Buffer.alloc(height * (1 + width * 3));
	for (let y = 0; y < height; y++) {
		raw[y * (1 + width * 3)] = 0; // filter: none
		for (let x = 0; x < width; x++) raw.set(pixel(x, y), y * (1 + width * 3) + 1 + x * 3);
	}
	const sig = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);
	return Buffer.concat([sig, chunk("IHDR", ihdr), chunk("IDAT", zlib.deflateSync(raw, { level: 9 })), chunk("IEND", Buffer.alloc(0))]);
}
// A 16x16 kanban-board favicon: three light columns on slate, with red, yellow and green cards.
const FAVICON = png(16, 16, (x, y) => {
	const rgb = (hex) => [0, 2, 4].map((i) => parseInt(hex.slice(i, i + 2), 16));
	const col = [1, 6, 11].findIndex((left) => x >= left && x < left + 4); // columns 4 px wide
	if (col < 0 || y < 1 || y > 14) return rgb("2b2d42"); // background
	if (y === 1) return rgb("8d99ae"); // column header
	const cardTops = [[3, 6, 9], [3, 6], [3]][col]; // cards are 2 px tall
	return cardTops.some((top) => y === top || y === top + 1) ? rgb(["ef476f", "ffd166", "06d6a0"][col]) : rgb("edf2f4");
}).toString("base64");

// ---------------------------------------------------------------- a session being written
class Session {
	/** New session in Pi's default nested layout for `cwd`. */
	constructor(cwd, startIso, { sm, files } = {}) {
		now = RealDate.parse(startIso);
		this.cwd = cwd;
		this.sm = sm ?? SessionManager.create(cwd, getDefaultSessionDir(cwd, AGENT));
		this.files = new Map(Object.entries(files ?? {})); // the project's files, as the tools see them
		this.model = MODELS.sonnet;
		this.thinkingLevel = "off";
	}
	setModel(key) {
		wait(2);
		this.model = MODELS[key];
		return this.sm.appendModelChange(this.model.provider, this.model.model);
	}
	setThinking(level) {
		wait(1);
		this.thinkingLevel = level;
		return this.sm.appendThinkingLevelChange(level);
	}
	/** The system message Pi records before the first prompt: real sections and tool declarations. */
	system() {
		const defs = createCodingToolDefinitions(this.cwd);
		const sections = buildSystemPromptSections({
			cwd: this.cwd,
			selectedTools: defs.map((d) => d.name),
			toolSnippets: Object.fromEntries(defs.map((d) => [d.name, d.promptSnippet])),
			toolGuidelines: Object.fromEntries(defs.map((d) => [d.name, d.promptGuidelines ?? []])),
		});
		// The docs section names Pi's install folder: show a global install, not this checkout.
		const piDir = path.dirname(getReadmePath());
		sections.docs = sections.docs.replaceAll(piDir, "/usr/lib/node_modules/@earendil-works/pi-coding-agent");
		wait(0.2);
		return this.sm.appendMessage({ role: "system", content: "", sections, toolsAdded: defs.map(toToolDeclaration), timestamp: now });
	}
	user(text, images = []) {
		wait(25 + text.length / 6); // reading and typing
		const content = [{ type: "text", text }, ...images.map((data) => ({ type: "image", data, mimeType: "image/png" }))];
		return this.sm.appendMessage({ role: "user", content, timestamp: now });
	}
	bang(command, output, exitCode = 0) {
		wait(12);
		return this.sm.appendMessage({ role: "bashExecution", command, output, exitCode, cancelled: false, truncated: false, timestamp: now });
	}
	/** Token usage of one request over the current context, priced like Pi does. */
	usage(outputTokens) {
		const context = Math.round(JSON.stringify(this.sm.buildSessionContext().messages).length / 3.7);
		const input = 3 + Math.floor(rand() * 40);
		const cacheRead = Math.max(0, Math.round(context * 0.82) - input);
		const cacheWrite = Math.max(0, context - cacheRead - input);
		const [pi, po, pr, pw] = this.model.price.map((p) => p / 1e6);
		const cost = { input: input * pi, output: outputTokens * po, cacheRead: cacheRead * pr, cacheWrite: cacheWrite * pw };
		cost.total = cost.input + cost.output + cost.cacheRead + cost.cacheWrite;
		return { input, output: outputTokens, cacheRead, cacheWrite, totalTokens: input + outputTokens + cacheRead + cacheWrite, cost };
	}
	/**
	 * One assistant turn. `blocks`: strings are text, {think}, {redacted: true}, or
	 * {tool, args, result?} for a tool call. Tool calls are run against `this.files`
	 * (read/edit/write) or given their `result` (bash), and their toolResult messages follow.
	 */
	assistant(blocks) {
		wait(1);
		const started = now;
		const content = [];
		const calls = [];
		let outputTokens = 0;
		for (const b of blocks) {
			if (typeof b === "string") content.push({ type: "text", text: b });
			else if (b.think !== undefined) {
				content.push(
					this.model.provider === "openai"
						? { type: "thinking", thinking: b.think, thinkingSignature: JSON.stringify({ type: "reasoning", id: `rs_${token(40)}`, summary: [{ type: "summary_text", text: b.think }] }) }
						: { type: "thinking", thinking: b.think, thinkingSignature: signature() },
				);
				outputTokens += 40; // hidden reasoning
			} else if (b.redacted) content.push({ type: "thinking", thinking: "", thinkingSignature: signature() + signature(), redacted: true });
			else {
				const id = this.model.provider === "openai" ? `call_${token(24)}|fc_${token(48).toLowerCase()}` : `toolu_01${token(22)}`;
				const call = { type: "toolCall", id, name: b.tool, arguments: b.args };
				content.push(call);
				calls.push([call, b]);
			}
			outputTokens += Math.ceil(JSON.stringify(content.at(-1)).length / 3.5);
		}
		const usage = this.usage(outputTokens);
		wait(1.5 + outputTokens / 60); // generation time
		const message = {
			role: "assistant",
			content,
			api: this.model.api,
			provider: this.model.provider,
			model: this.model.model,
			responseId: this.model.provider === "openai" ? `resp_${token(48).toLowerCase()}` : `msg_01${token(22)}`,
			...(this.thinkingLevel !== "off" ? { thinkingLevel: this.thinkingLevel } : {}),
			usage,
			stopReason: calls.length ? "toolUse" : "stop",
			timestamp: started,
			durationMs: now - started,
		};
		let last = this.sm.appendMessage(message);
		for (const [call, b] of calls) last = this.toolResult(call, b);
		return last;
	}
	toolResult(call, b) {
		const started = now;
		let text = b.result ?? "";
		let details;
		let isError = b.isError ?? false;
		const args = call.arguments;
		if (call.name === "read") {
			text = this.files.get(args.path);
			if (text === undefined) throw new Error(`example bug: no file ${args.path}`);
		} else if (call.name === "write") {
			this.files.set(args.path, args.content);
			text = `Successfully wrote to ${args.path}`;
		} else if (call.name === "edit") {
			// The real edit tool's matching and diff, on our in-memory copy of the project.
			try {
				const { baseContent, newContent, replacements } = applyEditsToNormalizedContent(this.files.get(args.path), args.edits, args.path);
				this.files.set(args.path, newContent);
				details = generateEditDiff(args.path, baseContent, newContent, replacements);
				text = `Successfully replaced ${args.edits.length} block(s) in ${args.path}.`;
			} catch (err) {
				if (!b.fails) throw err; // only where the story wants a failed edit
				text = err.message;
				details = {};
				isError = true;
			}
		} else if (call.name === "bash" && b.exitCode) {
			text = `${text}\n\nCommand exited with code ${b.exitCode}`;
			isError = true;
		}
		wait(call.name === "bash" ? 1.5 : 0.05);
		return this.sm.appendMessage({
			role: "toolResult",
			toolCallId: call.id,
			toolName: call.name,
			content: [{ type: "text", text }],
			...(details ? { details } : {}),
			isError,
			durationMs: now - started,
			timestamp: now,
		});
	}
	label(targetId, label) {
		wait(4);
		return this.sm.appendLabelChange(targetId, label);
	}
	name(name) {
		wait(5);
		return this.sm.appendSessionInfo(name);
	}
	branch(id) {
		wait(8); // navigating /tree
		this.sm.branch(id);
	}
}

// ================================================================ project 1: recipe-box (Python)
const RECIPE = "/home/ana/src/recipe-box";
const PARSER_PY = `"""Parse free-form ingredient lines like "2 cups flour"."""
import re
from dataclasses import dataclass
from fractions import Fraction

UNITS = {
    "cup": "cup", "cups": "cup",
    "tbsp": "tbsp", "tablespoon": "tbsp", "tablespoons": "tbsp",
    "tsp": "tsp", "teaspoon": "tsp", "teaspoons": "tsp",
    "g": "g", "gram": "g", "grams": "g",
}

QUANTITY = re.compile(r"^(\\d+(?:/\\d+)?)\\s+")


@dataclass
class Ingredient:
    quantity: Fraction | None
    unit: str | None
    name: str


def parse_ingredient(line: str) -> Ingredient:
    line = line.strip()
    quantity = None
    m = QUANTITY.match(line)
    if m:
        quantity = Fraction(m.group(1))
        line = line[m.end():]
    unit, _, rest = line.partition(" ")
    if unit.lower() in UNITS:
        return Ingredient(quantity, UNITS[unit.lower()], rest)
    return Ingredient(quantity, None, line)
`;
const TEST_PARSER_PY = `from fractions import Fraction

from recipe_box.parser import parse_ingredient


def test_simple_quantity():
    ing = parse_ingredient("2 cups flour")
    assert (ing.quantity, ing.unit, ing.name) == (Fraction(2), "cup", "flour")


def test_mixed_number_quantity():
    ing = parse_ingredient("1 1/2 cups flour")
    assert ing.quantity == Fraction(3, 2)
    assert ing.unit == "cup"
`;
const CLI_PY = `import argparse

from recipe_box.store import load_recipe


def main(argv=None):
    parser = argparse.ArgumentParser(prog="recipe-box")
    sub = parser.add_subparsers(dest="command", required=True)
    show = sub.add_parser("show", help="print a recipe")
    show.add_argument("name")
    args = parser.parse_args(argv)

    recipe = load_recipe(args.name)
    print(recipe.title)
    for ing in recipe.ingredients:
        print(f"  {ing.quantity or ''} {ing.unit or ''} {ing.name}".rstrip())
`;

const s1 = new Session(RECIPE, "2026-03-02T09:14:05.120Z", {
	files: { "recipe_box/parser.py": PARSER_PY, "tests/test_parser.py": TEST_PARSER_PY, "recipe_box/cli.py": CLI_PY },
});
s1.setModel("sonnet");
s1.setThinking("medium");
s1.system();
s1.user('pytest fails on the ingredient parser since I added mixed numbers to the tests. "1 1/2 cups flour" comes out as 1 of something. Can you take a look?');
s1.assistant([
	{ think: "Run the failing test first to see the exact assertion, then read the parser." },
	"Let me run the parser tests first.",
	{
		tool: "bash",
		args: { command: "python -m pytest -q tests/test_parser.py" },
		exitCode: 1,
		result: `.F                                                                       [100%]
=================================== FAILURES ===================================
__________________________ test_mixed_number_quantity __________________________

    def test_mixed_number_quantity():
        ing = parse_ingredient("1 1/2 cups flour")
>       assert ing.quantity == Fraction(3, 2)
E       AssertionError: assert Fraction(1, 1) == Fraction(3, 2)
E        +  where Fraction(1, 1) = Ingredient(quantity=Fraction(1, 1), unit=None, name='1/2 cups flour').quantity

tests/test_parser.py:13: AssertionError
=========================== short test summary info ============================
FAILED tests/test_parser.py::test_mixed_number_quantity - AssertionError: assert Fraction(1, 1) == Fraction(3, 2)
1 failed, 1 passed in 0.05s`,
	},
]);
s1.assistant([{ tool: "read", args: { path: "recipe_box/parser.py" } }]);
s1.assistant([
	{ think: "QUANTITY only takes one token, so for \"1 1/2\" it stops after the 1 and \"1/2\" becomes the unit candidate. Allow an optional fraction after the whole number and add it." },
	"`QUANTITY` only matches a single number, so `1 1/2` stops after the `1` and the `1/2` falls through into the unit and name. I'll accept an optional fraction after the whole number and add the two.",
	{
		tool: "edit",
		args: {
			path: "recipe_box/parser.py",
			edits: [
				{ oldText: 'QUANTITY = re.compile(r"^(\\d+(?:/\\d+)?)\\s+")', newText: 'QUANTITY = re.compile(r"^(\\d+(?:/\\d+)?)(?:\\s+(\\d+/\\d+))?\\s+")' },
				{ oldText: "        quantity = Fraction(m.group(1))\n", newText: "        quantity = Fraction(m.group(1))\n        if m.group(2):\n            quantity += Fraction(m.group(2))\n" },
			],
		},
	},
]);
s1.assistant([{ tool: "bash", args: { command: "python -m pytest -q tests/test_parser.py" }, result: "..                                                                       [100%]\n2 passed in 0.03s" }]);
const s1Fixed = s1.assistant([
	"Fixed. In `recipe_box/parser.py` the quantity pattern now takes an optional fraction after the whole number, so `1 1/2 cups flour` parses as `Fraction(3, 2)` cups of `flour`. Both parser tests pass.",
]);
s1.label(s1Fixed, "tests-green");
s1.bang("git diff --stat", " recipe_box/parser.py | 4 +++-\n 1 file changed, 3 insertions(+), 1 deletion(-)");
const s1BeforeAsk = s1.sm.getLeafId();
const s1FilesBeforeAsk = new Map(s1.files);

// First try: unicode fractions, no tests.
s1.user("Nice! Can you also support unicode fractions like ½ and ¾? Grandma's recipes are full of them.");
s1.assistant([
	{ think: "Map the vulgar fraction characters to Fractions and normalise them before matching." },
	{ redacted: true },
	"Sure, I'll map the common vulgar fractions to `Fraction`s before matching.",
	{
		tool: "edit",
		args: {
			path: "recipe_box/parser.py",
			edits: [
				{ oldText: "def parse_ingredient(line: str) -> Ingredient:\n    line = line.strip()\n", newText: 'VULGAR = {"½": " 1/2", "⅓": " 1/3", "⅔": " 2/3", "¼": " 1/4", "¾": " 3/4", "⅛": " 1/8"}\n\n\ndef parse_ingredient(line: str) -> Ingredient:\n    for char, text in VULGAR.items():\n        line = line.replace(char, text)\n    line = line.strip()\n' },
			],
		},
	},
]);
s1.assistant([
	{ tool: "bash", args: { command: "python -c 'from recipe_box.parser import parse_ingredient as p; print(p(\"1½ cups milk\"))'" }, result: "Ingredient(quantity=Fraction(3, 2), unit='cup', name='milk')" },
]);
s1.assistant(["Done: `½ ⅓ ⅔ ¼ ¾ ⅛` are rewritten to ` 1/2` etc. before parsing, so both `1½ cups` and `1 ½ cups` give `Fraction(3, 2)`."]);

// The user edits that message in /tree: a sibling branch that also asks for tests.
s1.branch(s1BeforeAsk);
s1.files = new Map(s1FilesBeforeAsk);
s1.user("Nice! Can you also support unicode fractions like ½ and ¾? Grandma's recipes are full of them. Please add a test for them too.");
s1.assistant([
	{ think: "Normalise vulgar fractions to ' n/d' before the regex; a parametrised test covering ½, 1½ and 2 ¾." },
	"I'll normalise the vulgar fractions before matching and add a parametrised test.",
	{
		tool: "edit",
		args: {
			path: "recipe_box/parser.py",
			edits: [
				{ oldText: "def parse_ingredient(line: str) -> Ingredient:\n    line = line.strip()\n", newText: 'VULGAR = {"½": " 1/2", "⅓": " 1/3", "⅔": " 2/3", "¼": " 1/4", "¾": " 3/4", "⅛": " 1/8"}\n\n\ndef parse_ingredient(line: str) -> Ingredient:\n    for char, text in VULGAR.items():\n        line = line.replace(char, text)\n    line = line.strip()\n' },
			],
		},
	},
	{
		tool: "edit",
		args: {
			path: "tests/test_parser.py",
			edits: [
				{ oldText: "from fractions import Fraction\n\n", newText: "from fractions import Fraction\n\nimport pytest\n\n" },
				{ oldText: '    assert ing.unit == "cup"\n', newText: '    assert ing.unit == "cup"\n\n\n@pytest.mark.parametrize("line, quantity", [\n    ("½ cup sugar", Fraction(1, 2)),\n    ("1½ cups milk", Fraction(3, 2)),\n    ("2 ¾ cups water", Fraction(11, 4)),\n])\ndef test_unicode_fractions(line, quantity):\n    assert parse_ingredient(line).quantity == quantity\n' },
			],
		},
	},
]);
s1.assistant([{ tool: "bash", args: { command: "python -m pytest -q" }, result: ".....                                                                    [100%]\n5 passed in 0.06s" }]);
s1.assistant(["Added `VULGAR` in `recipe_box/parser.py` (½ ⅓ ⅔ ¼ ¾ ⅛ become ` 1/2` … before matching) and `test_unicode_fractions` with three cases. All 5 tests pass."]);
s1.name("Fix fraction parsing");
s1.user("Perfect, commit it please.");
s1.assistant([{ tool: "bash", args: { command: 'git commit -am "parser: mixed numbers and unicode fractions"' }, result: "[main 4f2a9c1] parser: mixed numbers and unicode fractions\n 2 files changed, 19 insertions(+), 1 deletion(-)" }]);
s1.assistant(["Committed as `4f2a9c1`."]);
const s1File = s1.sm.getSessionFile();

// ---------------------------------------------------------------- a fork, then a model switch
// Later, Ana runs /fork and picks her "unicode fractions" message: Pi copies the path up to its
// parent (the `!git diff --stat`) into a new file, re-creating the labels on that path.
wait(240);
const forkSm = SessionManager.open(s1File, s1.sm.getSessionDir()); // what /fork does
forkSm.createBranchedSession(s1BeforeAsk);
const s2 = new Session(RECIPE, new RealDate(now).toISOString(), { sm: forkSm, files: Object.fromEntries(s1FilesBeforeAsk) });
s2.thinkingLevel = "medium";
s2.name("Metric units for show");
s2.setModel("gpt");
s2.user("New feature: `recipe-box show NAME --metric` should print grams instead of cups. Use a small density table per ingredient and fall back to water (240 g per cup).");
s2.assistant([
	{ think: "Look at the CLI first, then put the density table in its own module." },
	{ tool: "read", args: { path: "recipe_box/cli.py" } },
]);
s2.assistant([
	"I'll add the table and the conversion in a new `recipe_box/units.py` and wire a `--metric` flag into `show`.",
	{
		tool: "write",
		args: {
			path: "recipe_box/units.py",
			content: `"""Convert volume measures to grams."""
from fractions import Fraction

ML = {"cup": 240, "tbsp": 15, "tsp": 5}
DENSITY = {"flour": 0.53, "sugar": 0.85, "butter": 0.96, "milk": 1.03, "oats": 0.38}  # g per ml


def to_grams(quantity: Fraction, unit: str, name: str) -> int | None:
    if unit not in ML or quantity is None:
        return None
    density = next((d for key, d in DENSITY.items() if key in name.lower()), 1.0)
    return round(quantity * ML[unit] * Fraction(density))
`,
		},
	},
	{
		tool: "edit",
		args: {
			path: "recipe_box/cli.py",
			edits: [
				{ oldText: "from recipe_box.store import load_recipe\n", newText: "from recipe_box.store import load_recipe\nfrom recipe_box.units import to_grams\n" },
				{ oldText: '    show.add_argument("name")\n', newText: '    show.add_argument("name")\n    show.add_argument("--metric", action="store_true", help="show grams instead of cups")\n' },
				{ oldText: "    for ing in recipe.ingredients:\n", newText: "    for ing in recipe.ingredients:\n        grams = to_grams(ing.quantity, ing.unit, ing.name) if args.metric else None\n        if grams is not None:\n            print(f\"  {grams} g {ing.name}\")\n            continue\n" },
			],
		},
	},
]);
s2.assistant([
	{
		tool: "bash",
		args: { command: "recipe-box show pancakes --metric" },
		result: "Fluffy pancakes\n  159 g flour\n  26 g sugar\n  309 g milk\n  2  eggs\n  1  tsp. baking powder",
	},
]);
s2.assistant(["`--metric` works: `1 1/4 cups flour` shows as `159 g flour`. Items without a volume unit (eggs) are printed unchanged. The table lives in `recipe_box/units.py` if you want to add ingredients."]);
s2.user("Why is baking powder not converted? 1 tsp should be about 4 g.");
s2.assistant([
	{ think: "to_grams handles tsp, so that line must not have parsed as tsp. Check how the recipe spells it." },
	{ tool: "bash", args: { command: "grep -n 'baking' recipes/pancakes.txt" }, result: "4:1 tsp. baking powder" },
]);
const s2Answer = s2.assistant(["The recipe says `1 tsp.` with a dot, and `tsp.` is not in `UNITS`, so the line keeps its volume. Want me to accept a trailing dot on units (`tsp.`, `tbsp.`)?"]);
s2.label(s2Answer, "unit-dot-bug");

// ================================================================ project 2: tiny-kanban (JS)
const KANBAN = "/home/ana/src/tiny-kanban";
const INDEX_HTML = `<!doctype html>
<html lang="en">
<head>
  <meta charset="utf-8">
  <title>tiny kanban</title>
  <link rel="stylesheet" href="style.css">
</head>
<body>
  <main id="board">
    <section class="column" data-status="todo"><h2>To do</h2><ul></ul></section>
    <section class="column" data-status="doing"><h2>Doing</h2><ul></ul></section>
    <section class="column" data-status="done"><h2>Done</h2><ul></ul></section>
  </main>
  <script src="app.js"></script>
</body>
</html>
`;
const APP_JS = `const board = document.getElementById("board");

const cards = [
  { id: 1, title: "Sketch the layout", status: "done" },
  { id: 2, title: "Drag and drop", status: "doing" },
  { id: 3, title: "Save the board", status: "todo" },
];

function render() {
  for (const column of board.querySelectorAll(".column")) {
    const list = column.querySelector("ul");
    list.replaceChildren(
      ...cards
        .filter((card) => card.status === column.dataset.status)
        .map((card) => {
          const li = document.createElement("li");
          li.className = "card";
          li.textContent = card.title;
          li.dataset.id = card.id;
          return li;
        }),
    );
  }
}

render();
`;
const SERVER_JS = `import { createServer } from "node:http";
import { readFile } from "node:fs/promises";

const server = createServer(async (req, res) => {
  const file = req.url === "/" ? "index.html" : req.url.slice(1);
  try {
    res.end(await readFile(new URL(file, import.meta.url)));
  } catch {
    res.writeHead(404).end("not found");
  }
});

server.listen(8080, () => console.log("http://localhost:8080"));
`;

const s3 = new Session(KANBAN, "2026-03-04T19:32:40.512Z", { files: { "index.html": INDEX_HTML, "app.js": APP_JS, "server.js": SERVER_JS } });
s3.setModel("sonnet");
s3.setThinking("low");
s3.system();
s3.user("I drew a favicon for the board, it's `favicon.png` in the project root (attached so you can see it). Does it read OK at 16×16? And please hook it up in index.html.", [FAVICON]);
s3.assistant([
	{ think: "Three light columns with red, yellow and green cards on slate: reads as a kanban board. Add a link rel=icon." },
	"It reads well: three columns with red, yellow and green cards on a dark background are recognisable as a board even at 16×16, and the green \"done\" card stands out. Let me add it to the page.",
	{ tool: "read", args: { path: "index.html" } },
]);
s3.assistant([
	{ tool: "edit", args: { path: "index.html", edits: [{ oldText: '  <link rel="stylesheet" href="style.css">\n', newText: '  <link rel="icon" type="image/png" href="favicon.png">\n  <link rel="stylesheet" href="style.css">\n' }] } },
]);
s3.assistant(['Added `<link rel="icon" type="image/png" href="favicon.png">` to `index.html`. Reload with the cache disabled if the old icon sticks.']);
s3.user("Now let's make the cards draggable between columns. No libraries please.");
s3.assistant([
	{ think: "Native HTML5 drag and drop: draggable cards, dragstart sets the id, dragover preventDefault on columns, drop updates status and re-renders." },
	{ tool: "read", args: { path: "app.js" } },
]);
s3.assistant([
	"I'll use native drag and drop: cards get `draggable`, columns accept drops and update the card's status.",
	{
		tool: "edit",
		args: {
			path: "app.js",
			edits: [
				{ oldText: '          li.dataset.id = card.id;\n', newText: '          li.dataset.id = card.id;\n          li.draggable = true;\n          li.addEventListener("dragstart", (event) => {\n            event.dataTransfer.setData("text/plain", card.id);\n          });\n' },
				{ oldText: "render();\n", newText: 'for (const column of board.querySelectorAll(".column")) {\n  column.addEventListener("dragover", (event) => event.preventDefault());\n  column.addEventListener("drop", (event) => {\n    event.preventDefault();\n    const id = Number(event.dataTransfer.getData("text/plain"));\n    cards.find((card) => card.id === id).status = column.dataset.status;\n    render();\n  });\n}\n\nrender();\n' },
			],
		},
	},
]);
s3.assistant(["Cards can now be dragged between columns. `dragover` must call `preventDefault()`, otherwise the browser never fires `drop`."]);
const s3KeepFrom = s3.user("Dropping works, but the card always lands at the bottom of the column. Can it go where I drop it?");
s3.assistant([
	{ think: "Find the card under the pointer by comparing clientY with the middle of each card; splice the moved card into the array before it." },
	{
		tool: "edit",
		args: {
			path: "app.js",
			edits: [
				{ oldText: '    cards.find((card) => card.id === id).status = column.dataset.status;\n', newText: '    const moved = cards.splice(cards.findIndex((card) => card.id === id), 1)[0];\n    moved.status = column.dataset.status;\n    const below = [...column.querySelectorAll(".card")].find((li) => {\n      const box = li.getBoundingClientRect();\n      return event.clientY < box.top + box.height / 2 && Number(li.dataset.id) !== id;\n    });\n    const at = below ? cards.findIndex((card) => card.id === Number(below.dataset.id)) : cards.length;\n    cards.splice(at, 0, moved);\n' },
			],
		},
	},
]);
const s3Ordered = s3.assistant(["Now the drop handler finds the first card whose vertical middle is below the pointer and inserts the moved card before it (or at the end of the column)."]);
const s3FilesOrdered = new Map(s3.files);
wait(600); // Ana types /compact
const s3TokensBefore = estimateProjectedContextTokens(s3.sm.buildSessionProjection(), s3.sm.getBranch()).tokens; // as Pi does
s3.sm.appendCompaction(
	`## Goal
Polish the tiny-kanban board in /home/ana/src/tiny-kanban: favicon, drag and drop between columns, dropping at the pointer position.

## Constraints & Preferences
- No libraries (native HTML5 drag and drop only)

## Progress
### Done
- [x] Added favicon.png (16×16, drawn by the user) via <link rel="icon"> in index.html
- [x] Cards are draggable between columns (dragstart/dragover/drop in app.js)
- [x] Dropped cards are inserted at the pointer position

### In Progress
- [ ] (none)

### Blocked
- (none)

## Key Decisions
- **Native drag and drop**: the user asked for no libraries
- **Insert by card middle**: compare event.clientY with each card's vertical middle

## Next Steps
1. Persist the board so the order survives a reload

## Critical Context
- Card data lives in the \`cards\` array in app.js; render() rebuilds every column

<read-files>
index.html
</read-files>

<modified-files>
app.js
index.html
</modified-files>`,
	s3KeepFrom,
	s3TokensBefore,
	{ readFiles: ["index.html"], modifiedFiles: ["app.js", "index.html"] },
	false,
	s3.usage(612),
);
s3.user("Cards lose their order when I reload the page. Can we keep the board in localStorage?");
s3.assistant([
	{ tool: "edit", args: { path: "app.js", edits: [
		{ oldText: "const cards = [\n", newText: 'const saved = JSON.parse(localStorage.getItem("board") ?? "null");\nconst cards = saved ?? [\n' },
		{ oldText: "function render() {\n", newText: 'function render() {\n  localStorage.setItem("board", JSON.stringify(cards));\n' },
	] } },
]);
s3.assistant(["The board is saved to `localStorage` on every render and loaded on start, so the order survives a reload. Clear it with `localStorage.removeItem(\"board\")` in the console."]);
wait(3); // an extension speaks up
s3.sm.appendCustomMessageEntry("commit-nudge", "3 files changed since the last commit 16 minutes ago: app.js, index.html, favicon.png.", true, { files: ["app.js", "index.html", "favicon.png"], minutes: 16 });

// Back in /tree to before the localStorage change, with a summary of the abandoned branch.
wait(90);
s3.files = new Map(s3FilesOrdered);
s3.sm.branchWithSummary(
	s3Ordered,
	`The user explored a different conversation branch before returning here.
Summary of that exploration:

## Goal
Keep the card order across page reloads.

## Constraints & Preferences
- No libraries

## Progress
### Done
- [x] Saved the \`cards\` array to localStorage in render() and loaded it on start (app.js)

### In Progress
- [ ] (none)

### Blocked
- (none)

## Key Decisions
- **localStorage**: simplest option, but the board would not be shared between the user's laptop and phone

## Next Steps
1. Persist the board on the small node server instead

<modified-files>
app.js
</modified-files>`,
	{ readFiles: [], modifiedFiles: ["app.js"] },
	false,
	s3.usage(388),
);
s3.user("On second thought I want the same board on my phone. Can server.js keep it in board.json instead (GET and PUT /api/board)?");
s3.assistant([
	{ think: "Add a small JSON API to server.js: GET returns board.json (or []), PUT writes the body. Then fetch in app.js." },
	{ tool: "read", args: { path: "server.js" } },
]);
s3.assistant([
	{ tool: "edit", args: { path: "server.js", edits: [
		{ oldText: 'import { readFile } from "node:fs/promises";\n', newText: 'import { readFile, writeFile } from "node:fs/promises";\n\nconst BOARD = new URL("board.json", import.meta.url);\n' },
		{ oldText: '  const file = req.url === "/" ? "index.html" : req.url.slice(1);\n', newText: '  if (req.url === "/api/board") {\n    if (req.method === "PUT") {\n      let body = "";\n      for await (const chunk of req) body += chunk;\n      await writeFile(BOARD, body);\n      return res.writeHead(204).end();\n    }\n    return res.end(await readFile(BOARD).catch(() => "[]"));\n  }\n  const file = req.url === "/" ? "index.html" : req.url.slice(1);\n' },
	] } },
	{ tool: "edit", args: { path: "app.js", edits: [
		{ oldText: "}\n\nrender();\n", newText: '}\n\nasync function save() {\n  await fetch("/api/board", { method: "PUT", body: JSON.stringify(cards) });\n}\n\nconst stored = await (await fetch("/api/board")).json();\nif (stored.length) cards.splice(0, cards.length, ...stored);\nrender();\n' },
		{ oldText: "    cards.splice(at, 0, moved);\n    render();\n", newText: "    cards.splice(at, 0, moved);\n    render();\n    save();\n" },
		{ oldText: '  <script src="app.js"></script>', newText: '  <script type="module" src="app.js"></script>' },
	] }, fails: true }, // the script tag is in index.html, not app.js: the real edit tool refuses
]);
s3.assistant([
	{ think: "The script tag lives in index.html. Redo the app.js edits without it, then change index.html separately." },
	"Right, the `<script>` tag is in `index.html`. Redoing the two `app.js` changes, then the tag.",
	{ tool: "edit", args: { path: "app.js", edits: [
		{ oldText: "}\n\nrender();\n", newText: '}\n\nasync function save() {\n  await fetch("/api/board", { method: "PUT", body: JSON.stringify(cards) });\n}\n\nconst stored = await (await fetch("/api/board")).json();\nif (stored.length) cards.splice(0, cards.length, ...stored);\nrender();\n' },
		{ oldText: "    cards.splice(at, 0, moved);\n    render();\n", newText: "    cards.splice(at, 0, moved);\n    render();\n    save();\n" },
	] } },
	{ tool: "edit", args: { path: "index.html", edits: [{ oldText: '  <script src="app.js"></script>', newText: '  <script type="module" src="app.js"></script>' }] } },
]);
s3.assistant([
	{ tool: "bash", args: { command: "node server.js & sleep 0.5; curl -s -X PUT --data '[{\"id\":1,\"title\":\"test\",\"status\":\"todo\"}]' localhost:8080/api/board; curl -s localhost:8080/api/board; kill %1" }, result: 'http://localhost:8080\n[{"id":1,"title":"test","status":"todo"}]' },
]);
const s3Server = s3.assistant([
	"The board now lives in `board.json` next to `server.js`: `GET /api/board` returns it (or `[]`), `PUT /api/board` replaces it, and `app.js` loads it on start and saves after every drop. `app.js` is now an ES module, since it uses top-level `await`. Open `http://<your-laptop>:8080` on the phone to share the board.",
]);
s3.label(s3Server, "server-sync");
s3.bang("git status --short", " M app.js\n M index.html\n M server.js\n?? favicon.png");

// ---------------------------------------------------------------- a short question, next morning
const s4 = new Session(KANBAN, "2026-03-05T08:47:12.004Z");
s4.setModel("haiku");
s4.system();
s4.user("Quick question: what is the difference between `dragenter` and `dragover`? Do I need both?");
s4.assistant([
	"`dragenter` fires once when the dragged item enters an element; `dragover` fires repeatedly (every few hundred ms) while it stays over it.\n\nTo make an element a drop target you only *need* `dragover` with `event.preventDefault()`: that is what tells the browser a drop is allowed. Use `dragenter`/`dragleave` for visual feedback, like highlighting the column.",
]);
const s4Answered = s4.sm.getLeafId();
s4.user("And how do I highlight the column while a card is over it?");
s4.assistant([
	'Toggle a class from `dragenter` and `dragleave`:\n```js\ncolumn.addEventListener("dragenter", () => column.classList.add("over"));\ncolumn.addEventListener("dragleave", () => column.classList.remove("over"));\n```\nand style `.column.over` in `style.css`.',
]);
// Ana tries it, sees the highlight flicker, and edits her question in /tree: a sibling branch.
s4.branch(s4Answered);
s4.user("And how do I highlight the column without it flickering when I move over the cards inside it?");
s4.assistant([
	"The flicker comes from `dragleave` firing when the pointer moves from the column onto a child card. Two common fixes:\n\n1. Count enters and leaves:\n```js\nlet depth = 0;\ncolumn.addEventListener(\"dragenter\", () => { depth++; column.classList.add(\"over\"); });\ncolumn.addEventListener(\"dragleave\", () => { if (--depth === 0) column.classList.remove(\"over\"); });\ncolumn.addEventListener(\"drop\", () => { depth = 0; column.classList.remove(\"over\"); });\n```\n2. Or ignore the children with CSS while dragging: `.dragging .card { pointer-events: none; }`.\n\nThe counter is the more robust one.",
]);

// ================================================================ report
const written = [s1.sm, s2.sm, s3.sm, s4.sm].map((sm) => mapPath(sm.getSessionFile()));
let total = 0;
for (const file of written) {
	const size = fs.statSync(file).size;
	total += size;
	console.log(`${path.relative(REPO, file)}  ${size} bytes`);
}
console.log(`${written.length} sessions, ${total} bytes`);

// Self-check: Pi (through the interop oracle) opens a copy of each file without complaint.
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "pisessfs-examples-"));
for (const file of written) {
	const copy = path.join(tmp, path.basename(file));
	fs.copyFileSync(file, copy);
	const seen = JSON.parse(execFileSync(process.execPath, [path.join(REPO, "tests/pi/oracle.mjs"), copy], { encoding: "utf8" }));
	if (seen.error) throw new Error(`Pi cannot open ${file}: ${seen.error}`);
	if (!fs.readFileSync(copy).equals(fs.readFileSync(file))) throw new Error(`Pi rewrote ${file}`);
	console.log(`  ok: ${seen.entries.length} entries, ${seen.leaves.length} leaves, name ${JSON.stringify(seen.name)}`);
}
fs.rmSync(tmp, { recursive: true });
