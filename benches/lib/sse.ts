/** The JSON payloads of a streamed (server-sent events) response's `data:` lines, `[DONE]` left out. */
export async function* sseData(res: Response): AsyncGenerator<unknown> {
  let buf = "";
  for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
    buf += Buffer.from(chunk).toString("utf8");
    let nl: number;
    while ((nl = buf.indexOf("\n")) >= 0) {
      const line = buf.slice(0, nl).trim();
      buf = buf.slice(nl + 1);
      if (line.startsWith("data:") && line !== "data: [DONE]") yield JSON.parse(line.slice(5));
    }
  }
}
