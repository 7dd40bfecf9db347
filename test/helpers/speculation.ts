/** Speculative decoding through a served model: the answer of a chat, and the vLLM-named counters on /metrics. */
import type OpenAI from "openai";

/** The text of a non-streamed chat completion of `messages`, with `extra` fields in the body. */
export async function chatText(client: OpenAI, messages: OpenAI.ChatCompletionMessageParam[], extra: Record<string, unknown>): Promise<string> {
  const res = await client.chat.completions.create({ model: "any", messages, max_tokens: 96, ...extra } as OpenAI.ChatCompletionCreateParamsNonStreaming);
  return res.choices[0].message.content ?? "";
}

/** Drafting steps, drafted tokens and accepted ones so far (`wick:spec_decode_*_total` on /metrics). */
export async function specCounters(url: string): Promise<{ drafts: number; drafted: number; accepted: number }> {
  const text = await (await fetch(`${url}/metrics`)).text();
  const read = (name: string) => Number(new RegExp(`^wick:${name}_total\\{[^}]*\\} (\\S+)$`, "m").exec(text)?.[1] ?? NaN);
  return { drafts: read("spec_decode_num_drafts"), drafted: read("spec_decode_num_draft_tokens"), accepted: read("spec_decode_num_accepted_tokens") };
}
