/**
 * What the gateway records of an event that carries an upstream id: the id, and a digest of the
 * event as it passed (CONTRACT.md §4 E6, §5 check 7). An owner's replay is the recorded event only
 * when both are the same: the same number with other bytes is an owner that numbers its events
 * anew, not a replay.
 *
 * A tag is `~` and 11 characters of digest (66 bits of SHA-1, base64url), a space, then the id.
 * The digest is of the event's block in the form serializer.ts writes it, its `id:` line
 * included: a block copied as bytes (canonical.ts) and the same block parsed and written again
 * give the same digest. A position recorded without a tag (by an earlier version of the gateway)
 * holds the bare id: its event is compared by id alone.
 *
 * Not a defence against a replica that forges its events: a misbuilt replica's fresh counter is
 * what it catches, at a cost of one hash of each event's bytes (docs/performance.md).
 */
import { hash } from 'node:crypto';

const MARK = '~';
const DIGEST_CHARS = 11;
/** `~`, the digest and the space: where the id begins in a tag. */
const ID_AT = 1 + DIGEST_CHARS + 1;

/** The digest of one event's block (canonical form, id line included). */
export function eventDigest(block: Uint8Array | string): string {
  return hash('sha1', block, 'base64url').slice(0, DIGEST_CHARS);
}

/** The record of an event: its upstream id and the digest of its block. */
export function eventTag(id: string, block: Uint8Array | string): string {
  return `${MARK}${eventDigest(block)} ${id}`;
}

function tagged(tag: string): boolean {
  return tag.length >= ID_AT && tag.charCodeAt(0) === 0x7e && tag.charCodeAt(ID_AT - 1) === 0x20;
}

/** The upstream id that a recorded position names (a bare id, as an earlier version recorded it, is its own). */
export function tagId(tag: string): string {
  return tagged(tag) ? tag.slice(ID_AT) : tag;
}

/** The digest a recorded position holds; undefined for a bare id. */
export function tagDigest(tag: string): string | undefined {
  return tagged(tag) ? tag.slice(1, 1 + DIGEST_CHARS) : undefined;
}

/**
 * How an event that the owner replays compares with `expected[index]`, the recorded one it must be
 * (check 7): `same` (its id and its bytes); `reused` (the recorded id with other bytes, or the id
 * of an event recorded before it: an owner numbering anew, E6); or `other` (an id never recorded,
 * or one of a later event: a skipped, reordered or missing event). `recorded` holds the ids
 * recorded for the incarnation.
 */
export function compareReplayed(
  expected: readonly string[],
  index: number,
  id: string,
  block: () => Uint8Array | string,
  recorded: ReadonlySet<string>,
): 'same' | 'reused' | 'other' {
  const tag = expected[index]!;
  if (id === tagId(tag)) {
    const digest = tagDigest(tag);
    return digest === undefined || digest === eventDigest(block()) ? 'same' : 'reused';
  }
  if (!recorded.has(id)) return 'other';
  for (let i = index + 1; i < expected.length; i++) if (tagId(expected[i]!) === id) return 'other';
  return 'reused';
}
