/**
 * Import layering of ts/ (docs/architecture.md, Layers): data flows HTTP/CLI → ts/service →
 * ts/engine (the addon's typed wrapper) → ts/native (the addon), never back up. Every
 * `ts/**\/*.ts` (but ts/native) is read for its relative imports (static `import … from`,
 * `export … from`, `import("…")`, and `require("…")` through `createRequire`); the test fails
 * on any import circle in the whole graph, and on any import a rule below forbids.
 */
import test from "ava";
import { existsSync, readdirSync, readFileSync, statSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import ts from "typescript";

/** The API wings, each a folder of ts/server/routes/. */
const WINGS = ["openai", "native", "responses", "anthropic"];

/**
 * The rules: a module under `from` (and not under `unless`) never imports a module under `to`;
 * with `types: true`, a type-only import (`import type`, `export type`, or every name marked
 * `type`) is allowed, since it leaves nothing at run time.
 */
const RULES: { from: string; unless?: string; to: string; types?: boolean; why: string }[] = [
  { from: "ts/service/", to: "ts/server/", why: "the service layer serves HTTP and the CLI alike" },
  { from: "ts/service/", to: "ts/cli/", why: "the service layer serves HTTP and the CLI alike" },
  { from: "ts/store/", to: "ts/engine/", why: "the model store reads files and registries; it never runs a model" },
  { from: "ts/", unless: "ts/engine/", to: "ts/native/", why: "only the engine wrapper touches the addon" },
  { from: "ts/server/routes/", to: "ts/engine/", types: true, why: "routes reach the engine through ts/service (types alone may be named)" },
  // One API wing never imports another: shared code goes to ts/server/routes/common.ts.
  ...WINGS.flatMap((from) =>
    WINGS.filter((to) => to !== from).map((to) => ({
      from: `ts/server/routes/${from}/`,
      to: `ts/server/routes/${to}/`,
      why: "one API wing never imports another (shared code: ts/server/routes/common.ts)",
    })),
  ),
];

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const rel = (file: string) => path.relative(root, file).split(path.sep).join("/");

interface Edge {
  from: string;
  to: string;
  line: number;
  typeOnly: boolean;
}

function sources(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const full = path.join(dir, entry.name);
    if (entry.isDirectory()) return rel(full) === "ts/native" ? [] : sources(full);
    return entry.name.endsWith(".ts") && !entry.name.endsWith(".d.ts") ? [full] : [];
  });
}

/** The file a relative specifier names: as written, with `.js` read as `.ts`, or a folder's index. */
function resolve(fromFile: string, spec: string): string {
  const target = path.resolve(path.dirname(fromFile), spec);
  const candidates = [target, target.replace(/\.js$/, ".ts"), `${target}.ts`, path.join(target, "index.ts")];
  return rel(candidates.find((c) => existsSync(c) && statSync(c).isFile()) ?? target);
}

function importsOf(file: string): Edge[] {
  const text = readFileSync(file, "utf8");
  const source = ts.createSourceFile(file, text, ts.ScriptTarget.Latest, true);
  const edges: Edge[] = [];
  const add = (spec: ts.Node | undefined, typeOnly: boolean) => {
    if (!spec || !ts.isStringLiteralLike(spec) || !spec.text.startsWith(".")) return;
    const line = source.getLineAndCharacterOfPosition(spec.getStart()).line + 1;
    edges.push({ from: rel(file), to: resolve(file, spec.text), line, typeOnly });
  };
  const visit = (node: ts.Node) => {
    if (ts.isImportDeclaration(node)) {
      const clause = node.importClause;
      const bindings = clause?.namedBindings;
      const allNamedTypes = !!clause && !clause.name && !!bindings && ts.isNamedImports(bindings) && bindings.elements.length > 0 && bindings.elements.every((e) => e.isTypeOnly);
      add(node.moduleSpecifier, !!clause && (clause.isTypeOnly || allNamedTypes));
    } else if (ts.isExportDeclaration(node)) {
      const clause = node.exportClause;
      const allNamedTypes = !!clause && ts.isNamedExports(clause) && clause.elements.length > 0 && clause.elements.every((e) => e.isTypeOnly);
      add(node.moduleSpecifier, node.isTypeOnly || allNamedTypes);
    } else if (ts.isImportTypeNode(node)) {
      // `import("…").Type` in a type position
      const arg = node.argument;
      if (ts.isLiteralTypeNode(arg)) add(arg.literal, true);
    } else if (ts.isCallExpression(node) && node.arguments.length > 0) {
      const callee = node.expression;
      const dynamicImport = callee.kind === ts.SyntaxKind.ImportKeyword;
      const require = ts.isIdentifier(callee) && callee.text === "require";
      const createRequire = ts.isCallExpression(callee) && ts.isIdentifier(callee.expression) && callee.expression.text === "createRequire";
      if (dynamicImport || require || createRequire) add(node.arguments[0], false);
    }
    ts.forEachChild(node, visit);
  };
  visit(source);
  return edges;
}

const files = sources(path.join(root, "ts")).sort();
const edges = files.flatMap(importsOf);

/** The import circles a depth-first walk meets: one per back edge, each written from its first file back to it. */
function cycles(): string[][] {
  const next = new Map<string, string[]>();
  for (const e of edges) next.set(e.from, [...new Set([...(next.get(e.from) ?? []), e.to])].sort());
  const found: string[][] = [];
  const state = new Map<string, "open" | "done">();
  const stack: string[] = [];
  const dfs = (node: string) => {
    state.set(node, "open");
    stack.push(node);
    for (const to of next.get(node) ?? []) {
      if (state.get(to) === "open") found.push([...stack.slice(stack.indexOf(to)), to]);
      else if (!state.has(to)) dfs(to);
    }
    stack.pop();
    state.set(node, "done");
  };
  for (const file of files.map(rel)) if (!state.has(file)) dfs(file);
  return found;
}

test("the scan finds the ts/ sources and their imports", (t) => {
  t.true(files.length > 50, `${files.length} files under ts/`);
  // A sample of each import form the scan must see.
  const has = (from: string, to: string) => edges.some((e) => e.from === from && e.to === to);
  t.true(has("ts/engine/addon.ts", "ts/native/native.cjs"), "createRequire(…)(…)");
  t.true(has("ts/engine/index.ts", "ts/native/native.d.ts"), "import type");
  t.true(has("ts/cli/main.ts", "ts/cli/serve.ts"), 'import("…")');
  t.true(has("ts/lib.ts", "ts/engine/index.ts"), "import / export … from");
});

test("ts/ has no import circle", (t) => {
  const found = cycles();
  t.deepEqual(
    found.map((c) => c.join(" → ")),
    [],
    "import circles (move what both sides share into a module of its own)",
  );
});

test("ts/ imports keep to the layering rules", (t) => {
  const broken = edges.flatMap((e) =>
    RULES.filter((r) => e.from.startsWith(r.from) && !(r.unless && e.from.startsWith(r.unless)) && e.to.startsWith(r.to) && !(r.types && e.typeOnly)).map(
      (r) => `${e.from}:${e.line} imports ${e.to}: ${r.from} never imports ${r.to}${r.types ? " (but types)" : ""}: ${r.why}`,
    ),
  );
  t.deepEqual(broken, []);
});
