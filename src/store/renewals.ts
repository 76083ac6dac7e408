/**
 * An instance's liveness renewed on a fixed schedule (docs/journal.md#instance-liveness), telling
 * how late each renewal landed against it: the first is due at once, each next one `everyMs` after
 * the one before was due. A renewal that did not land (the store failed it, or it was not sent)
 * tells nothing, and the next one is due on the same schedule. A schedule fallen behind by more
 * than a period (a stalled loop) starts over from now: a stall is counted once, as late as it was.
 */
export function renewOnSchedule(renew: () => Promise<boolean>, everyMs: number, renewed: (lateMs: number) => void): () => void {
  let due = performance.now();
  let timer: NodeJS.Timeout | undefined;
  let stopped = false;
  const tick = async (): Promise<void> => {
    const landed = await renew().catch(() => false);
    if (stopped) return;
    const now = performance.now();
    if (landed) renewed(Math.max(0, now - due));
    due = Math.max(due + everyMs, now);
    timer = setTimeout(() => void tick(), due - now);
    timer.unref();
  };
  void tick();
  return () => {
    stopped = true;
    clearTimeout(timer);
  };
}
