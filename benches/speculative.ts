/**
 * Speculative decoding (n-gram lookup, or a draft model with `--draft-model`) on copy-heavy and
 * free-form work, Wick beside llama-server (`--spec-type ngram-simple`, or `-md <draft>
 * --spec-type draft-simple`) on the same files, 2 threads, one server at a time:
 *
 *   npx tsx benches/speculative.ts [--model .cache/models/SmolLM2-135M-Instruct.Q4_1.gguf] \
 *       [--draft-model draft.gguf [--p-min 0.1]] [--draft-max 16] [--rounds 3] [--threads 2] \
 *       [--results benches/RESULTS.md]
 *
 * Workloads (chat, greedy): `edit` rewrites a ~600-token code file with one rename, `quote`
 * answers by quoting a document, `chat` is free-form. Each engine runs each with speculation on
 * and off (per request: `speculative.type`), and reports decode tokens/s (streamed: the first
 * token to the last), the speed-up over its own decode, the acceptance rate (Wick's /metrics;
 * llama-server's `timings.draft_n` / `draft_n_accepted`), and whether the text with speculation
 * equals the text without (it must, for Wick). The bandwidth floor is the file's bytes over the
 * machine's read bandwidth (`--bandwidth`, GB/s) per token: speculation is past it when its
 * effective tokens/s are above `1 / floor`.
 */
import { statSync } from "node:fs";
import { parseArgs } from "node:util";
import { startServer, stopServer, type Server } from "./compare.ts";
import { appendResults, machine } from "./lib/provenance.ts";
import { sseData } from "./lib/sse.ts";
import { markdownTable } from "./serving.ts";

const { values: a } = parseArgs({
  options: {
    model: { type: "string", default: ".cache/models/SmolLM2-135M-Instruct.Q4_1.gguf" },
    "draft-max": { type: "string", default: "16" },
    "draft-model": { type: "string" },
    "p-min": { type: "string", default: "0.1" },
    rounds: { type: "string", default: "3" },
    threads: { type: "string", default: "2" },
    bandwidth: { type: "string", default: "45" },
    results: { type: "string" },
  },
});
const draftMax = Number(a["draft-max"]);
const draftModel = a["draft-model"];
const specType = draftModel ? "draft-simple" : "ngram-simple";
const rounds = Number(a.rounds);

/** A ~600-token Python module: distinct lines, as a real file has. */
const CODE = `import json
from dataclasses import dataclass, field
from typing import Optional


@dataclass
class Account:
    owner: str
    balance: float = 0.0
    history: list = field(default_factory=list)

    def deposit(self, amount: float) -> None:
        if amount <= 0:
            raise ValueError("deposit must be positive")
        self.balance += amount
        self.history.append(("deposit", amount))

    def withdraw(self, amount: float) -> None:
        if amount > self.balance:
            raise ValueError("insufficient funds")
        self.balance -= amount
        self.history.append(("withdraw", amount))


class Bank:
    def __init__(self, name: str):
        self.name = name
        self.accounts: dict[str, Account] = {}

    def open(self, owner: str, initial: float = 0.0) -> Account:
        if owner in self.accounts:
            raise KeyError(f"{owner} already has an account")
        account = Account(owner, initial)
        self.accounts[owner] = account
        return account

    def find(self, owner: str) -> Optional[Account]:
        return self.accounts.get(owner)

    def transfer(self, source: str, target: str, amount: float) -> None:
        src = self.accounts[source]
        dst = self.accounts[target]
        src.withdraw(amount)
        dst.deposit(amount)

    def total(self) -> float:
        return sum(a.balance for a in self.accounts.values())

    def save(self, path: str) -> None:
        data = {o: {"balance": a.balance, "history": a.history} for o, a in self.accounts.items()}
        with open(path, "w") as f:
            json.dump({"name": self.name, "accounts": data}, f, indent=2)

    @classmethod
    def load(cls, path: str) -> "Bank":
        with open(path) as f:
            data = json.load(f)
        bank = cls(data["name"])
        for owner, info in data["accounts"].items():
            account = bank.open(owner, info["balance"])
            account.history = [tuple(h) for h in info["history"]]
        return bank


if __name__ == "__main__":
    bank = Bank("Example")
    bank.open("alice", 100.0)
    bank.open("bob", 50.0)
    bank.transfer("alice", "bob", 25.0)
    print(bank.total())
`;

const DOC = `The lighthouse at Point Reyes was built in 1870 and stands on a ledge three hundred feet above the Pacific. Its first-order Fresnel lens, made in France, has 24 panels and 1,032 pieces of glass, and it was turned by a clockwork mechanism that the keepers had to wind every two and a half hours through the night.

Fog is the station's defining feature. The headland is one of the foggiest places on the Pacific coast, with more than two thousand hours of fog a year, and the fog signal often ran for days at a time. Keepers wrote in their logs of loneliness, of the wind that could knock a person off the stairs, and of the 308 steps between the lighthouse and the keepers' quarters.

The light was automated in 1975, when the Coast Guard installed a modern beacon. The original lens remains in place, and the National Park Service opens the lighthouse to visitors on most weekends, weather permitting. Visitors are asked to check the wind before walking down, because the stairs close when gusts exceed forty miles per hour.`;

const WORKLOADS: { name: string; prompt: string; maxTokens: number }[] = [
  { name: "edit", prompt: `Rename the class Bank to Ledger everywhere in this file and print the whole updated file, nothing else.\n\n${CODE}`, maxTokens: 900 },
  { name: "quote", prompt: `${DOC}\n\nQuote, word for word, the paragraph of the text above that is about fog, then the paragraph about automation.`, maxTokens: 300 },
  { name: "chat", prompt: "Write a short story about a lighthouse keeper who finds a message in a bottle.", maxTokens: 300 },
];

interface Run {
  text: string;
  tokens: number;
  decodeTps: number;
  drafted: number;
  accepted: number;
}

/** One streamed greedy chat completion: its text, tokens, decode speed and (llama-server) draft counts. */
async function chat(server: Server, prompt: string, maxTokens: number, spec: boolean): Promise<Run> {
  const body = {
    model: "m",
    messages: [{ role: "user", content: prompt }],
    max_tokens: maxTokens,
    temperature: 0,
    stream: true,
    stream_options: { include_usage: true },
    "speculative.type": spec ? specType : "none",
    ...(spec ? { "speculative.n_max": draftMax } : {}),
  };
  const res = await fetch(`${server.url}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
  if (!res.ok || !res.body) throw new Error(`${server.name}: HTTP ${res.status} ${await res.text()}`);
  let text = "";
  let tokens = 0;
  let first = 0;
  let last = 0;
  let drafted = 0;
  let accepted = 0;
  for await (const ev of sseData(res)) {
    const j = ev as {
      choices?: { delta?: { content?: string } }[];
      usage?: { completion_tokens: number };
      timings?: { draft_n?: number; draft_n_accepted?: number };
    };
    const delta = j.choices?.[0]?.delta?.content;
    if (delta) {
      const now = performance.now();
      if (!first) first = now;
      last = now;
      text += delta;
    }
    if (j.usage) tokens = j.usage.completion_tokens;
    if (j.timings?.draft_n !== undefined) [drafted, accepted] = [j.timings.draft_n, j.timings.draft_n_accepted ?? 0];
  }
  return { text, tokens, decodeTps: (tokens - 1) / ((last - first) / 1000), drafted, accepted };
}

async function wickCounters(server: Server): Promise<[number, number]> {
  const text = await (await fetch(`${server.url}/metrics`)).text();
  const read = (name: string) => Number(new RegExp(`^wick:${name}_total\\{[^}]*\\} (\\S+)$`, "m").exec(text)?.[1] ?? 0);
  return [read("spec_decode_num_draft_tokens"), read("spec_decode_num_accepted_tokens")];
}

type Key = `${"wick" | "llama"}/${string}/${"on" | "off"}`;
const runs = new Map<Key, Run[]>();

// llama-server's ngram-simple drafts size-m tokens after a size-n match (defaults 48 and 12, sized
// for GPUs): here the same lengths as Wick's; its draft model the same draft-max and p-min. Its
// per-request `speculative.type: none` does not stop a server started with --spec-type from
// drafting, so its "off" is a server without it; Wick's is the same server, per request.
const LLAMA_SPEC = draftModel
  ? ["-md", draftModel, "--spec-type", "draft-simple", "--spec-draft-n-max", String(draftMax), "--spec-draft-p-min", a["p-min"]!]
  : ["--spec-type", "ngram-simple", "--spec-ngram-simple-size-n", "4", "--spec-ngram-simple-size-m", String(draftMax)];
const WICK_SPEC = draftModel ? ["-md", draftModel, "--draft-p-min", a["p-min"]!] : ["--spec-type", "ngram-simple"];
const SERVERS: { kind: "wick" | "llama"; extra: string[]; modes: boolean[] }[] = [
  { kind: "wick", extra: [...WICK_SPEC, "--draft-max", String(draftMax)], modes: [true, false] },
  { kind: "llama", extra: [...LLAMA_SPEC, "--jinja"], modes: [true] },
  { kind: "llama", extra: ["--jinja"], modes: [false] },
];

for (let round = 0; round < rounds; round++) {
  for (const { kind, extra, modes } of SERVERS) {
    const server = await startServer(kind, `${kind}-spec`, a.model!, Number(a.threads), 1, 4096, extra);
    try {
      for (const w of WORKLOADS) {
        for (const spec of modes) {
          const before = kind === "wick" ? await wickCounters(server) : [0, 0];
          const r = await chat(server, w.prompt, w.maxTokens, spec);
          if (kind === "wick") {
            const after = await wickCounters(server);
            [r.drafted, r.accepted] = [after[0] - before[0], after[1] - before[1]];
          }
          const key: Key = `${kind}/${w.name}/${spec ? "on" : "off"}`;
          runs.set(key, [...(runs.get(key) ?? []), r]);
          process.stderr.write(`round ${round + 1} ${key}: ${r.tokens} tokens, ${r.decodeTps.toFixed(1)} tok/s, ${r.accepted}/${r.drafted} accepted\n`);
        }
      }
    } finally {
      await stopServer(server);
    }
  }
}

const median = (v: number[]) => [...v].sort((x, y) => x - y)[Math.floor(v.length / 2)]!;
const floorTps = (Number(a.bandwidth) * 1e9) / statSync(a.model!).size;
const rows: string[][] = [];
for (const w of WORKLOADS) {
  for (const kind of ["wick", "llama"] as const) {
    const on = runs.get(`${kind}/${w.name}/on`)!;
    const off = runs.get(`${kind}/${w.name}/off`)!;
    const [tOn, tOff] = [median(on.map((r) => r.decodeTps)), median(off.map((r) => r.decodeTps))];
    const drafted = on.reduce((s, r) => s + r.drafted, 0);
    const accepted = on.reduce((s, r) => s + r.accepted, 0);
    const same = on.every((r, i) => r.text === off[i]!.text);
    rows.push([
      w.name,
      kind === "wick" ? "Wick" : "llama-server",
      String(median(on.map((r) => r.tokens))),
      tOff.toFixed(1),
      tOn.toFixed(1),
      `${(tOn / tOff).toFixed(2)}×`,
      drafted ? `${((100 * accepted) / drafted).toFixed(0)}% of ${Math.round(drafted / on.length)}` : "–",
      `${((100 * tOn) / floorTps).toFixed(0)}%`,
      same ? "yes" : "no",
    ]);
  }
}
const wickOn = (w: string) => median(runs.get(`wick/${w}/on`)!.map((r) => r.decodeTps));
const llamaOn = (w: string) => median(runs.get(`llama/${w}/on`)!.map((r) => r.decodeTps));
const table = markdownTable(["workload", "engine", "tokens", "decode tok/s, off", "on", "speed-up", "accepted (drafted/run)", "of floor rate", "same text"], rows);
const summary =
  `Model ${a.model}${draftModel ? `, draft model ${draftModel} (p-min ${a["p-min"]})` : ", n-gram drafts"}, draft-max ${draftMax}, ${rounds} rounds (medians), ${a.threads} threads, ${machine()}. ` +
  `Bandwidth floor: ${floorTps.toFixed(0)} tok/s (${(statSync(a.model!).size / 1e6).toFixed(0)} MB at ${a.bandwidth} GB/s). ` +
  `Wick / llama-server with speculation: ${WORKLOADS.map((w) => `${w.name} ${(wickOn(w.name) / llamaOn(w.name)).toFixed(2)}×`).join(", ")}.`;
process.stdout.write(`${table}\n\n${summary}\n`);
const title = `speculative decoding (${draftModel ? "draft model" : "n-gram"}) vs llama-server`;
if (a.results) appendResults(a.results, "benches/speculative.ts", title, `${table}\n\n${summary}`);
