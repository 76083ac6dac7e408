/**
 * A bounded memory of ids seen lately, so that one event about one id is logged once, however
 * many requests run into it before the store has recorded it. When full, the oldest id goes.
 */
export class RecentIds {
  readonly #ids = new Set<string>();

  constructor(private readonly capacity: number) {}

  /** True the first time `id` is offered (since it was last forgotten). */
  firstTime(id: string): boolean {
    if (this.#ids.has(id)) return false;
    if (this.#ids.size >= this.capacity) {
      const oldest = this.#ids.values().next().value;
      if (oldest !== undefined) this.#ids.delete(oldest);
    }
    this.#ids.add(id);
    return true;
  }
}
