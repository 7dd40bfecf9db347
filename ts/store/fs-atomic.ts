/**
 * The store's only ways of writing bytes: through a FileSink (so tests can inject a disk that
 * fills up), into a temp file with a unique name in the target's own directory, fsync'd, then
 * renamed over the target and the directory fsync'd. A reader sees the old file or the whole
 * new one, never a part; two writers of the same file each rename a complete copy.
 */
import { createHash, randomBytes } from "node:crypto";
import { constants, createReadStream, promises as fsp } from "node:fs";
import path from "node:path";

/** Where written bytes go. `write` resolves once every byte of `chunk` is written. */
export interface FileSink {
  write(chunk: Uint8Array): Promise<void>;
  sync(): Promise<void>;
  close(): Promise<void>;
}

/** Opens a sink: `create` fails if the file exists (temp names are unique); `append` creates or appends. */
export type SinkOpener = (file: string, mode: "create" | "append") => Promise<FileSink>;

export const openFileSink: SinkOpener = async (file, mode) => {
  const fh = await fsp.open(file, mode === "create" ? "wx" : "a");
  return {
    async write(chunk) {
      let off = 0;
      while (off < chunk.byteLength) {
        const { bytesWritten } = await fh.write(chunk, off, chunk.byteLength - off);
        off += bytesWritten;
      }
    },
    sync: () => fh.sync(),
    close: () => fh.close(),
  };
};

/** A temp name beside `target` that no other writer picks: `.name.<random>.tmp`. */
export function tempNameFor(target: string): string {
  return path.join(path.dirname(target), `.${path.basename(target)}.${randomBytes(6).toString("hex")}.tmp`);
}

/** Whether a directory entry is one of our temp files (never listed, removed when stale). */
export const isTempName = (name: string) => name.startsWith(".") && name.endsWith(".tmp");

/** fsync a directory so a rename in it survives a crash. Some filesystems refuse; that is not an error. */
export async function syncDir(dir: string): Promise<void> {
  let fh: fsp.FileHandle | undefined;
  try {
    fh = await fsp.open(dir, constants.O_RDONLY);
    await fh.sync();
  } catch {
    // EINVAL/EISDIR on filesystems without directory fsync: nothing more we can do.
  } finally {
    await fh?.close().catch(() => {});
  }
}

/** Writes `data` to `target` atomically (temp + fsync + rename + dir fsync). */
export async function writeFileAtomic(target: string, data: Uint8Array | string, open: SinkOpener = openFileSink): Promise<void> {
  await fsp.mkdir(path.dirname(target), { recursive: true });
  const tmp = tempNameFor(target);
  const bytes = typeof data === "string" ? Buffer.from(data, "utf8") : data;
  let sink: FileSink | undefined;
  try {
    sink = await open(tmp, "create");
    await sink.write(bytes);
    await sink.sync();
    await sink.close();
    sink = undefined;
    await fsp.rename(tmp, target);
  } catch (err) {
    await sink?.close().catch(() => {});
    await fsp.rm(tmp, { force: true }).catch(() => {});
    throw err;
  }
  await syncDir(path.dirname(target));
}

/** Removes `dir` and its parents up to (not including) `stop` while they are empty. */
export async function removeEmptyDirs(dir: string, stop: string): Promise<void> {
  let d = dir;
  while (d.startsWith(stop + path.sep) && d !== stop) {
    try {
      await fsp.rmdir(d);
    } catch {
      return; // not empty (or gone): stop climbing
    }
    d = path.dirname(d);
  }
}

export async function exists(p: string): Promise<boolean> {
  return fsp.access(p).then(
    () => true,
    () => false,
  );
}

/** sha256:<hex> of a file's content. */
export async function sha256File(file: string): Promise<string> {
  const hash = createHash("sha256");
  for await (const chunk of createReadStream(file, { highWaterMark: 1 << 20 })) hash.update(chunk as Buffer);
  return `sha256:${hash.digest("hex")}`;
}
