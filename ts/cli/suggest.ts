/** "Did you mean": the closest candidate by edit distance, as commander suggests commands. */

/** Optimal string alignment distance (Damerau-Levenshtein with adjacent transpositions). */
function distance(a: string, b: string): number {
  const d: number[][] = Array.from({ length: a.length + 1 }, (_, i) => [i, ...Array<number>(b.length).fill(0)]);
  for (let j = 1; j <= b.length; j++) d[0][j] = j;
  for (let i = 1; i <= a.length; i++) {
    for (let j = 1; j <= b.length; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1;
      let v = Math.min(d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost);
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) v = Math.min(v, d[i - 2][j - 2] + 1);
      d[i][j] = v;
    }
  }
  return d[a.length][b.length];
}

/**
 * The candidate nearest to `word` (ties: the first listed), if it is near enough: at most a
 * third of the word's letters differ, or one candidate starts with the word (`--max-model` →
 * `--max-model-len`).
 */
export function closest(word: string, candidates: string[]): string | undefined {
  const w = word.replace(/=.*$/, "");
  let best: string | undefined;
  let bestD = Infinity;
  for (const c of candidates) {
    const dd = distance(w, c);
    if (dd < bestD) [best, bestD] = [c, dd];
  }
  const body = w.replace(/^-+/, "");
  if (best && bestD <= Math.max(1, Math.floor(body.length / 3))) return best;
  const prefixed = candidates.filter((c) => c.startsWith(w) && body.length >= 3);
  return prefixed.length === 1 ? prefixed[0] : undefined;
}
