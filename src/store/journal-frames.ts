/**
 * J1: the payloads of a batch's events as the journal keeps them, in one buffer: for each event,
 * its UTF-8 length as 4 bytes (big-endian) and its bytes (its SSE block without the id line). The
 * Redis store sends this buffer to its record script as it is, which appends it without reading it
 * (scripts/journal.ts); the memory store keeps the texts.
 *
 * Built from bytes where the rewriter copied a block from the replica's chunk (its id line cut
 * out): the bytes go into the frames once, without a string for each event that is encoded again.
 */
export class JournalFrames {
  /** The frames, back to back. */
  readonly frames: Buffer;
  /** Events framed. */
  readonly length: number;
  /** Every payload is ASCII: decoded as Latin-1, which is the same text and quicker. */
  readonly ascii: boolean;

  private constructor(frames: Buffer, length: number, ascii: boolean) {
    this.frames = frames;
    this.length = length;
    this.ascii = ascii;
  }

  static readonly EMPTY = new JournalFrames(Buffer.alloc(0), 0, true);

  /**
   * Each text framed on its own: joined, a lone surrogate at the end of one and one at the start of
   * the next would pair and encode differently.
   */
  static of(texts: readonly string[]): JournalFrames {
    const builder = new JournalFramesBuilder();
    for (const text of texts) builder.text(text);
    return builder.build(EMPTY);
  }

  /** Batches one after the other, as one. */
  static join(list: readonly JournalFrames[]): JournalFrames {
    if (list.length === 1) return list[0]!;
    let length = 0;
    let ascii = true;
    for (const f of list) {
      length += f.length;
      ascii &&= f.ascii;
    }
    return new JournalFrames(
      Buffer.concat(list.map((f) => f.frames)),
      length,
      ascii,
    );
  }

  /** The payloads' bytes, without their frames (what the journal byte metric counts). */
  get payloadBytes(): number {
    return this.frames.length - 4 * this.length;
  }

  /** Each payload as text (the bytes are UTF-8: copied only when valid, or encoded from text). */
  texts(): string[] {
    const texts = new Array<string>(this.length);
    const frames = this.frames;
    const ascii = this.ascii;
    let at = 0;
    for (let i = 0; i < this.length; i++) {
      const len = frames.readUInt32BE(at);
      texts[i] = textOf(frames, ascii, at + 4, at + 4 + len);
      at += 4 + len;
    }
    return texts;
  }

  /** @internal JournalFramesBuilder's way in: frames it wrote, `length` of them. */
  static fromBuilder(frames: Buffer, length: number, ascii: boolean): JournalFrames {
    return new JournalFrames(frames, length, ascii);
  }
}

/**
 * Buffer's own methods behind toString, without its argument handling, which costs as much as the
 * decoding for strings of an event's size (undici reads bodies with utf8Slice too).
 */
interface RawBuffer extends Buffer {
  latin1Slice(start: number, end: number): string;
  utf8Slice(start: number, end: number): string;
}

/** buf[start, end) as text, UTF-8: Latin-1 is the same text for ASCII, and quicker to decode. */
export function textOf(buf: Buffer, ascii: boolean, start: number, end: number): string {
  return ascii ? (buf as RawBuffer).latin1Slice(start, end) : (buf as RawBuffer).utf8Slice(start, end);
}

const EMPTY = Buffer.alloc(0);
const TEXT = -1;

/**
 * A batch's frames as its events are read: texts, or two ranges of the chunk being read (an event
 * copied from it, before and after its id line). Written into one buffer by build.
 */
export class JournalFramesBuilder {
  /** Four numbers an event: a range's from and to and the second range's, or TEXT and the text's index. */
  readonly #ops: number[] = [];
  readonly #texts: string[] = [];
  #count = 0;
  #ascii = true;

  get length(): number {
    return this.#count;
  }

  text(text: string): void {
    this.#ops.push(TEXT, this.#texts.length, 0, 0);
    this.#texts.push(text);
    this.#count++;
  }

  /** Bytes [from, to) and [from2, to2) of the chunk that build is given, as one payload; ASCII or not. */
  copied(from: number, to: number, from2: number, to2: number, ascii: boolean): void {
    this.#ops.push(from, to, from2, to2);
    this.#count++;
    this.#ascii &&= ascii;
  }

  /** The frames, copied ranges read from `chunk`. */
  build(chunk: Buffer): JournalFrames {
    if (this.#count === 0) return JournalFrames.EMPTY;
    const ops = this.#ops;
    const lengths = new Array<number>(this.#count);
    let total = 4 * this.#count;
    let ascii = this.#ascii;
    for (let i = 0, e = 0; i < ops.length; i += 4, e++) {
      let len: number;
      if (ops[i] === TEXT) {
        const text = this.#texts[ops[i + 1]!]!;
        len = Buffer.byteLength(text);
        // As many bytes as characters: every one is ASCII.
        ascii &&= len === text.length;
      } else {
        len = ops[i + 1]! - ops[i]! + ops[i + 3]! - ops[i + 2]!;
      }
      lengths[e] = len;
      total += len;
    }
    const frames = Buffer.allocUnsafe(total);
    let at = 0;
    for (let i = 0, e = 0; i < ops.length; i += 4, e++) {
      at = frames.writeUInt32BE(lengths[e]!, at);
      if (ops[i] === TEXT) {
        at += frames.write(this.#texts[ops[i + 1]!]!, at, 'utf8');
      } else {
        at += chunk.copy(frames, at, ops[i]!, ops[i + 1]!);
        at += chunk.copy(frames, at, ops[i + 2]!, ops[i + 3]!);
      }
    }
    return JournalFrames.fromBuilder(frames, this.#count, ascii);
  }
}
