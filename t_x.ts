import net from "node:net";
import { cliHome } from "./test/helpers/cli.ts";
const other = net.createServer((s) => s.destroy()).listen(0, "127.0.0.1");
await new Promise((r) => other.once("listening", r));
const busy = (other.address() as net.AddressInfo).port;
const h = await cliHome();
for (let i = 0; i < 3; i++) {
  const r = await h.wick(["list"], { env: { WICK_HOST: `127.0.0.1:${busy}` } });
  console.log(r.status, r.stderr);
}
other.close(); await h.close();
