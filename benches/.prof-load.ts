// Drives the 4-distinct LoRA load at a server for `secs` seconds.
const [url, secs, mode] = [process.argv[2]!, Number(process.argv[3] ?? 10), process.argv[4] ?? "many"];
const end = performance.now() + secs * 1000;
let i = 0, tokens = 0;
const t0 = performance.now();
await Promise.all(Array.from({ length: 8 }, async () => {
  while (performance.now() < end) {
    const k = i++;
    const lora = mode === "none" ? [] : mode === "one" ? [{ id: 0, scale: 1 }] : [{ id: k % 4, scale: 1 }];
    const r = await fetch(`${url}/v1/completions`, { method: "POST", headers: { "content-type": "application/json" },
      body: JSON.stringify({ model: "m", prompt: `Story ${k}: once upon a time`, max_tokens: 64, temperature: 0, ignore_eos: true, lora }) });
    const j = await r.json() as any; tokens += j.usage.completion_tokens;
  }
}));
console.log(mode, (tokens / ((performance.now() - t0) / 1000)).toFixed(1), "tok/s");
