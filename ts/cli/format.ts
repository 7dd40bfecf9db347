/** How the client commands print: Ollama's aligned tables, sizes, relative times and durations. */

/** Columns left-aligned, 4 spaces apart, as Ollama's `list` and `ps` print them (no trailing spaces). */
export function table(header: string[], rows: string[][]): string {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? "").length)));
  const line = (cells: string[]) =>
    cells
      .map((c, i) => (i === cells.length - 1 ? c : c.padEnd(widths[i] + 4)))
      .join("")
      .trimEnd();
  return [line(header), ...rows.map(line)].join("\n") + "\n";
}

/** Ollama's format.HumanBytes: decimal units, "93 MB", "1.2 GB", "512 B". */
export function humanBytes(n: number): string {
  const units: [number, string][] = [
    [1e12, "TB"],
    [1e9, "GB"],
    [1e6, "MB"],
    [1e3, "KB"],
  ];
  for (const [scale, unit] of units) {
    if (n < scale) continue;
    const v = n / scale;
    return v >= 10 || Number.isInteger(v) ? `${Math.floor(v)} ${unit}` : `${v.toFixed(1)} ${unit}`;
  }
  return `${n} B`;
}

/** Ollama's format.humanDuration: "Less than a second", "About a minute", "3 hours", "2 weeks". */
function humanDuration(ms: number): string {
  const seconds = Math.floor(ms / 1000);
  if (seconds < 1) return "Less than a second";
  if (seconds === 1) return "1 second";
  if (seconds < 60) return `${seconds} seconds`;
  const minutes = Math.floor(seconds / 60);
  if (minutes === 1) return "About a minute";
  if (minutes < 60) return `${minutes} minutes`;
  const hours = Math.round(ms / 3_600_000);
  if (hours === 1) return "About an hour";
  if (hours < 48) return `${hours} hours`;
  if (hours < 24 * 7 * 2) return `${Math.floor(hours / 24)} days`;
  if (hours < 24 * 30 * 2) return `${Math.floor(hours / 24 / 7)} weeks`;
  if (hours < 24 * 365 * 2) return `${Math.floor(hours / 24 / 30)} months`;
  return `${Math.floor(ms / 3_600_000 / 24 / 365)} years`;
}

/** Ollama's format.HumanTime: "2 minutes ago", "4 minutes from now", "Forever" (20+ years ahead). */
export function humanTime(when: Date | string, now = Date.now()): string {
  const t = typeof when === "string" ? Date.parse(when) : when.getTime();
  if (!Number.isFinite(t)) return "-";
  const delta = now - t;
  if (delta < -20 * 365 * 86_400_000) return "Forever";
  return delta < 0 ? `${humanDuration(-delta)} from now` : `${humanDuration(delta)} ago`;
}

/** A short duration for timings and ETAs: "850ms", "12.3s", "2m05s", "1h02m". */
export function shortDuration(ms: number): string {
  if (!Number.isFinite(ms) || ms < 0) return "?";
  if (ms < 1000) return `${Math.round(ms)}ms`;
  if (ms < 60_000) return `${(ms / 1000).toFixed(ms < 10_000 ? 2 : 1)}s`;
  const s = Math.round(ms / 1000);
  if (s < 3600) return `${Math.floor(s / 60)}m${String(s % 60).padStart(2, "0")}s`;
  return `${Math.floor(s / 3600)}h${String(Math.floor((s % 3600) / 60)).padStart(2, "0")}m`;
}
