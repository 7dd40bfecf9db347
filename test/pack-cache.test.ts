/**
 * The pack cache through `wick serve`: the first start saves the repacked weights under
 * $WICK_HOME/cache/packs, the next one maps them (its "model loaded" log line says which), and
 * both answer a greedy request with the text of a start with `--no-mmap` (no cache);
 * `WICK_PACK_CACHE=off` and `--no-mmap` leave the cache alone, and `WICK_PACK_CACHE=<dir>`
 * moves it.
 */
import test from "ava";
import { existsSync, mkdtempSync, readdirSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { needs, repoRoot, smollm2 } from "./helpers/assets.ts";
import { BIN } from "./helpers/cli.ts";
import { spawnServe } from "./helpers/process.ts";
import { waitFor } from "./helpers/server.ts";
import { createModel, ModelStore } from "../ts/store/index.ts";

const { path: smol, serial } = needs(smollm2());

let home: string;
test.before(() => {
  home = mkdtempSync(path.join(os.tmpdir(), "wick-packs-"));
});
test.after.always(() => rmSync(home, { recursive: true, force: true }));

interface Start {
  text: string;
  /** The "model loaded" line's `packCache`, when it has one. */
  packCache?: { state: string; path?: string; weights?: number; reason?: string };
}

/** `wick serve -m <model> <args>`: one greedy completion, then SIGTERM (once a cache file being written is whole). */
async function serveOnce(args: string[], env: NodeJS.ProcessEnv = {}, model = smol!): Promise<Start> {
  const s = await spawnServe(BIN, ["-m", model, "--port", "0", "-t", "2", ...args], { cwd: repoRoot, env: { ...process.env, WICK_HOME: home, WICK_PACK_CACHE: "", ...env } });
  try {
    const res = await fetch(`${s.url}/v1/completions`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ prompt: "The three primary colors are", max_tokens: 24, temperature: 0 }),
    });
    const body = (await res.json()) as { choices: { text: string }[] };
    const packCache = s.logs().find((l) => l.msg === "model loaded")?.packCache as Start["packCache"];
    if (packCache?.state === "writing") await waitFor(() => existsSync(packCache.path!), 60_000, 20);
    return { text: body.choices[0].text, packCache };
  } finally {
    s.child.kill("SIGTERM");
    await s.exit;
  }
}

const packs = (dir: string) => (existsSync(dir) ? readdirSync(dir).filter((f) => f.endsWith(".wpack")) : []);

serial("the first start saves the packed weights, the next maps them, and both answer as a start without the cache", async (t) => {
  const dir = path.join(home, "cache", "packs");
  const plain = await serveOnce(["--no-mmap"]);
  t.is(plain.packCache, undefined, "--no-mmap: no cache");
  t.deepEqual(packs(dir), []);

  const first = await serveOnce([]);
  t.is(first.packCache?.state, "writing");
  t.is(path.dirname(first.packCache!.path!), dir);
  t.is(first.text, plain.text);
  t.deepEqual(packs(dir), [path.basename(first.packCache!.path!)]);
  const second = await serveOnce([]);
  t.is(second.packCache?.state, "read");
  t.is(second.packCache?.path, first.packCache!.path);
  t.true((second.packCache?.weights ?? 0) > 0);
  t.is(second.text, plain.text);
  t.log(`${plain.text.trim()} | read ${second.packCache?.weights} packed weights from ${path.basename(second.packCache!.path!)}`);
});

serial("WICK_PACK_CACHE=off leaves the cache alone; WICK_PACK_CACHE=<dir> moves it", async (t) => {
  const off = await serveOnce([], { WICK_PACK_CACHE: "off" });
  t.is(off.packCache, undefined);
  const elsewhere = path.join(home, "elsewhere");
  const moved = await serveOnce([], { WICK_PACK_CACHE: elsewhere });
  t.is(path.dirname(moved.packCache!.path!), elsewhere);
  t.is(moved.text, off.text);
});

serial("a store model's pack cache goes with its blob (wick rm, DELETE /api/delete)", async (t) => {
  const store = new ModelStore({ home });
  await createModel(store, "smol-packs", `FROM ${smol}`);
  const served = await serveOnce([], {}, "smol-packs");
  t.is(served.packCache?.state, "writing");
  const file = served.packCache!.path!;
  t.true(existsSync(file));
  t.regex(path.basename(file), /^sha256-[0-9a-f]{64}-[0-9a-f]{16}\.wpack$/, "named after the blob");
  t.true((await store.delete("smol-packs")).length > 0, "the blob was removed");
  t.false(existsSync(file));
});
