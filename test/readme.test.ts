/**
 * The README's first command (install, build, fetch the default model, serve) really serves:
 * run it as written, on a free loopback port, and chat with the real openai client.
 */
import test from "ava";
import { spawn } from "node:child_process";
import { readFileSync } from "node:fs";
import path from "node:path";
import OpenAI from "openai";
import { repoRoot } from "./helpers/assets.ts";
import { freePort } from "./helpers/server.ts";

function readmeCommands(): string[] {
  const readme = readFileSync(path.join(repoRoot, "README.md"), "utf8");
  const block = /## Two commands[\s\S]*?```sh\n([\s\S]*?)```/.exec(readme)?.[1] ?? "";
  return block.split("\n").filter((l) => l.trim() && !l.trim().startsWith("#"));
}

test("the README has exactly two commands: serve and test", (t) => {
  const cmds = readmeCommands();
  t.is(cmds.length, 2);
  t.regex(cmds[0], /npm start/);
  t.regex(cmds[1], /npm test/);
  const ci = readFileSync(path.join(repoRoot, ".ci/run"), "utf8");
  t.true(ci.includes("npm test"), ".ci/run calls the README's test command");
});

test("the README's first command serves a chat request", async (t) => {
  const port = await freePort();
  const child = spawn("bash", ["-c", readmeCommands()[0]], {
    cwd: repoRoot,
    env: { ...process.env, WICK_HOST: `127.0.0.1:${port}` },
    detached: true,
    stdio: ["ignore", "pipe", "pipe"],
  });
  let out = "";
  child.stdout.on("data", (d) => (out += d));
  child.stderr.on("data", (d) => (out += d));
  try {
    const deadline = Date.now() + 240_000;
    for (;;) {
      if (child.exitCode !== null) t.fail(`exited with ${child.exitCode}:\n${out.slice(-2000)}`);
      const ok = await fetch(`http://127.0.0.1:${port}/health`).then(
        (r) => r.ok,
        () => false,
      );
      if (ok) break;
      if (Date.now() > deadline) t.fail(`no /health after 240 s:\n${out.slice(-2000)}`);
      await new Promise((r) => setTimeout(r, 500));
    }
    const client = new OpenAI({ baseURL: `http://127.0.0.1:${port}/v1`, apiKey: "none", maxRetries: 0 });
    const res = await client.chat.completions.create({
      model: "default",
      messages: [{ role: "user", content: "Say hello." }],
      max_tokens: 8,
      temperature: 0,
    });
    t.is(res.object, "chat.completion");
    t.true(res.choices[0].message.content!.length > 0);
    t.log(`reply: ${JSON.stringify(res.choices[0].message.content)}`);
  } finally {
    process.kill(-child.pid!, "SIGTERM");
  }
});
