/** Metrics of a gateway in another process, read from its admin listener as Prometheus text. */

/**
 * The sum of the samples of `name` whose labels include `labels` (0 when there are none), from
 * `${adminUrl}/metrics`.
 */
export async function scrapeMetric(adminUrl: string, name: string, labels: Record<string, string> = {}): Promise<number> {
  const text = await (await fetch(`${adminUrl}/metrics`)).text();
  let sum = 0;
  for (const line of text.split('\n')) {
    if (!line.startsWith(name) || (line[name.length] !== '{' && line[name.length] !== ' ')) continue;
    const body = line[name.length] === '{' ? line.slice(name.length + 1, line.lastIndexOf('}')) : '';
    const pairs = new Set(body.split(/,(?=[a-zA-Z_]+=")/));
    if (Object.entries(labels).every(([key, value]) => pairs.has(`${key}="${value}"`))) sum += Number(line.slice(line.lastIndexOf(' ') + 1));
  }
  return sum;
}
