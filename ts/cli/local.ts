/**
 * `wick run model.gguf`: the file loaded in this process (as llama-cli loads its -m file),
 * served on a private loopback port so the chat goes through the same /api routes as with a
 * server; closed when the command ends.
 */
import type { AddressInfo } from "node:net";
import { createApp } from "../server/app.ts";
import { ModelManager } from "../service/models.ts";
import { ModelStore } from "../store/index.ts";
import { WickClient } from "./client.ts";
import { CliError } from "./errors.ts";

export async function startLocal(file: string): Promise<{ client: WickClient; model: string; close(): Promise<void> }> {
  const store = new ModelStore();
  const models = new ModelManager({ store, load: store.packCache() });
  models.setDefault({ path: file });
  let id: string;
  try {
    id = (await models.loadDefault()).id;
  } catch (err) {
    throw new CliError(`cannot load ${file}: ${(err as Error).message}`);
  }
  const server = createApp({ models }).listen(0, "127.0.0.1");
  await new Promise<void>((resolve, reject) => {
    server.once("listening", resolve);
    server.once("error", reject);
  });
  const { port } = server.address() as AddressInfo;
  return {
    client: new WickClient(`http://127.0.0.1:${port}`),
    model: id,
    async close() {
      server.close();
      server.closeAllConnections();
      await models.close();
    },
  };
}
