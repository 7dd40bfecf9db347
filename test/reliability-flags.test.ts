/**
 * The reliability flags of `wick serve` refuse bad values at start-up with one line naming the
 * flag, exit 1, as every other serve flag does (test/cli.test.ts).
 */
import test from "ava";
import { wick } from "./helpers/cli.ts";

const BAD: [string, string[], RegExp][] = [
  ["--cors not an origin", ["--cors", "example.com"], /--cors <origins>.*'example\.com'.*not an origin/],
  ["--cors with a path", ["--cors", "https://a.example/app"], /--cors <origins>.*no path/],
  ["--allowed-origins not a JSON list of strings", ["--allowed-origins", "[1]"], /--allowed-origins.*JSON list of origins/],
  ["--timeout zero", ["--timeout", "0"], /--timeout <seconds>.*'0'.*> 0/],
  ["-to not a number", ["-to", "soon"], /-to.*'soon'/],
  ["--max-connections zero", ["--max-connections", "0"], /--max-connections <n>.*positive integer/],
  ["--shutdown-timeout negative", ["--shutdown-timeout", "-1"], /--shutdown-timeout <seconds>.*'-1'/],
];

for (const [name, args, pattern] of BAD) {
  test(`bad start-up: ${name} → exit 1 with one line naming it`, async (t) => {
    const r = await wick(["serve", ...args], { env: { ...process.env, WICK_HOST: "" }, timeoutMs: 60_000 });
    t.is(r.status, 1, r.stderr);
    t.is(r.lines.length, 1, r.stderr);
    t.regex(r.lines[0], pattern);
    t.log(r.lines[0]);
  });
}
