/**
 * The Dockerfile. Always: its steps are the commands CI and the package test run (so a green
 * CI says the image would build), and it keeps the GPU servers' conventions (published port,
 * the store on a volume, WICK_HOST on all interfaces, a /health check, no token baked in).
 * With WICK_CONTAINER_TEST=1, where podman and the base image can be had
 * (scripts/pack-base-image.sh: debootstrap + this machine's Node), the image is built from the
 * packed tarballs and run: published port, a chat answered, the health check passing. That run
 * is opt-in, not part of `npm test`: CI's machines are not promised a container runtime (the
 * issue asks for it "where a container tool can be had"), and a CI that cannot nest containers
 * must not fail on it. Run by hand: `WICK_CONTAINER_TEST=1 npx ava test/package-docker.test.ts`
 * (benches/RESULTS.md records a run).
 */
import { execFile, execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import path from "node:path";
import { promisify } from "node:util";
import test from "ava";
import { localFile, needs, repoRoot, smollm2, type Asset } from "./helpers/assets.ts";
import { freePort } from "./helpers/server.ts";

const run = promisify(execFile);
const read = (p: string) => readFileSync(path.join(repoRoot, p), "utf8");
const dockerfile = read("Dockerfile");
const BASE = "localhost/wick-node-base:bookworm";

/** Instructions with continuation lines joined, comments dropped: [keyword, rest]. */
function instructions(src: string): [string, string][] {
  return src
    .replace(/\\\n/g, " ")
    .split("\n")
    .map((l) => l.trim())
    .filter((l) => l && !l.startsWith("#"))
    .map((l) => {
      const [kw, ...rest] = l.split(/\s+/);
      return [kw.toUpperCase(), rest.join(" ").replace(/\s+/g, " ")];
    });
}

/** Each stage's RUN commands (split on &&), by stage name ("" for the unnamed final stage). */
function runSteps(): Map<string, string[]> {
  const stages = new Map<string, string[]>();
  let stage = "";
  for (const [kw, rest] of instructions(dockerfile)) {
    if (kw === "FROM") {
      stage = / AS (\S+)$/i.exec(rest)?.[1] ?? "";
      stages.set(stage, []);
    } else if (kw === "RUN") stages.get(stage)!.push(...rest.split("&&").map((c) => c.trim()));
  }
  return stages;
}

test("the build stage runs CI's commands: .ci/run's npm install, scripts/test.sh's build, the package test's pack", (t) => {
  const steps = runSteps().get("build")!;
  const ci = read(".ci/run");
  const testSh = read("scripts/test.sh").replace(/npm run --silent /g, "npm run ");
  const readme = read("README.md");
  const packageTest = read("test/package.test.ts");
  t.deepEqual(
    steps.filter((s) => !s.startsWith("ln -s")),
    ["npm install", "npm run build:native", "bash scripts/pack.sh /pkg"],
  );
  t.regex(ci, /^npm install$/m);
  t.true(readme.includes("npm install && npm test"));
  t.regex(testSh, /^npm run build:native /m);
  t.true(packageTest.includes('"scripts/pack.sh"'), "the package test packs with the same script");
});

test("the image installs the tarballs as the package test does, and serves as the GPU servers' images do", (t) => {
  const final = runSteps().get("")!;
  t.true(final[0].startsWith("npm install -g --no-audit --no-fund --include=optional /tmp/pkg/wick-[0-9]*.tgz /tmp/pkg/wick-linux-$(node -p process.arch)-gnu-*.tgz"), final[0]);
  t.true(read("test/package.test.ts").includes('"install", "--no-audit", "--no-fund", "--include=optional"'));
  const all = instructions(dockerfile);
  const has = (kw: string, re: RegExp) => all.some(([k, rest]) => k === kw && re.test(rest));
  t.true(has("ENV", /WICK_HOST=0\.0\.0\.0:11434/), "listens on all interfaces");
  t.true(has("ENV", /WICK_HOME=\/data/) && has("VOLUME", /^\/data$/), "the model store is a volume");
  t.true(has("EXPOSE", /^11434$/));
  t.true(has("HEALTHCHECK", /\/health/));
  t.true(has("ENTRYPOINT", /\["wick"\]/));
  t.false(/HF_TOKEN=/.test(dockerfile), "HF_TOKEN is passed at run time (-e HF_TOKEN), never baked in");
  t.true(dockerfile.includes("-e HF_TOKEN"));
});

function podmanImage(): Asset {
  try {
    execFileSync("podman", ["image", "exists", BASE], { stdio: "ignore", timeout: 30_000 });
    return { path: BASE };
  } catch {
    return { missing: `podman with the base image ${BASE} (apt-get install podman debootstrap; scripts/pack-base-image.sh)` };
  }
}

/**
 * Flags for podman on machines like this one (a container itself, without CAP_SYS_RESOURCE and
 * with hybrid cgroups): limits no higher than the host's, and runc where it is installed, as
 * crun refuses hybrid cgroups. Harmless elsewhere.
 */
function podmanFlags(): string[] {
  const limits = ["--ulimit", "nofile=4096:4096", "--ulimit", "nproc=4096:4096"];
  try {
    execFileSync("runc", ["--version"], { stdio: "ignore" });
    return ["--runtime", "runc", ...limits];
  } catch {
    return limits;
  }
}

const containerRun = process.env.WICK_CONTAINER_TEST === "1";
const built = containerRun ? needs(podmanImage(), smollm2(), localFile(path.join(repoRoot, "ts/native/wick.linux-x64-gnu.node"), "run npm run build:native")) : undefined;

built?.serial("podman builds the Dockerfile from the packed tarballs; the container serves a chat on its published port and passes its health check", async (t) => {
  await run("bash", ["scripts/pack.sh", "artifacts/pack"], { cwd: repoRoot, maxBuffer: 1 << 24 });
  const image = "localhost/wick-test:latest";
  const started = performance.now();
  const flags = podmanFlags();
  await run("podman", ["build", ...flags, "--format", "docker", "--build-arg", `NODE_IMAGE=${BASE}`, "--build-arg", "PACKAGES=prebuilt", "-t", image, "."], {
    cwd: repoRoot,
    maxBuffer: 1 << 26,
    timeout: 240_000,
  });
  t.log(`podman build (prebuilt packages): ${((performance.now() - started) / 1000).toFixed(1)} s`);
  const port = await freePort();
  const model = path.dirname(smollm2Path());
  const name = `wick-test-${process.pid}`;
  await run("podman", [
    "run",
    ...flags,
    "-d",
    "--name",
    name,
    "-p",
    `127.0.0.1:${port}:11434`,
    "-v",
    `${model}:/models:ro`,
    "-v",
    `${name}:/data`,
    image,
    "serve",
    "-m",
    `/models/${path.basename(smollm2Path())}`,
  ]);
  t.teardown(async () => {
    await run("podman", ["rm", "-f", name]).catch(() => {});
    await run("podman", ["volume", "rm", "-f", name]).catch(() => {});
  });
  const deadline = Date.now() + 120_000;
  let health = 0;
  while (Date.now() < deadline) {
    health = await fetch(`http://127.0.0.1:${port}/health`).then(
      (r) => r.status,
      () => 0,
    );
    if (health === 200) break;
    await new Promise((r) => setTimeout(r, 500));
  }
  t.is(health, 200, (await run("podman", ["logs", name]).catch((e: Error) => ({ stdout: e.message }))).stdout);
  const res = await fetch(`http://127.0.0.1:${port}/v1/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ model: "m", messages: [{ role: "user", content: "Hello" }], max_tokens: 4, temperature: 0 }),
  });
  t.is(res.status, 200);
  // The image's own HEALTHCHECK command, run once.
  await t.notThrowsAsync(run("podman", ["healthcheck", "run", name]));
});

function smollm2Path(): string {
  return (smollm2() as { path: string }).path;
}
