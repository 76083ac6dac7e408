/**
 * Retrying an operation that failed for a passing reason, with capped exponential backoff, until a
 * time budget is spent. Used where a store blip must not become an error at once (see callers).
 */
export async function retryWithin<T>(
  budgetMs: number,
  pauses: { firstMs: number; maxMs: number },
  attempt: () => Promise<T>,
  retryable: (err: unknown) => boolean = () => true,
): Promise<T> {
  const deadline = performance.now() + budgetMs;
  for (let pause = pauses.firstMs; ; pause = Math.min(pause * 2, pauses.maxMs)) {
    try {
      return await attempt();
    } catch (err) {
      if (!retryable(err) || performance.now() + pause > deadline) throw err;
      await new Promise((resolve) => setTimeout(resolve, pause));
    }
  }
}
