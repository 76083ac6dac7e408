/**
 * Markdown links and anchors as GitHub renders them, as far as the docs' link test needs: the
 * anchors of a page (its headings' slugs, and `<a id>` / `<a name>` anchors) and its links (inline,
 * reference definitions, `href`), outside fenced code and code spans.
 */
import { existsSync, readFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';

/**
 * GitHub's anchor of a heading's text (github-slugger): lower case, every character that is not a
 * letter, a mark, a digit, `_`, `-` or a space removed, each space a hyphen. Inline markup goes
 * first: a link keeps its text, an HTML tag goes; backticks and emphasis are punctuation.
 */
export function slug(heading: string): string {
  const text = heading.replace(/!?\[([^\]]*)\]\([^)]*\)/g, '$1').replace(/<[^>]+>/g, '');
  return text.toLowerCase().replace(/[^\p{L}\p{M}\p{N}_\- ]/gu, '').replace(/ /g, '-');
}

/** Fenced code blocks' lines are none of the page's text. */
function proseLines(markdown: string): { text: string; line: number }[] {
  const lines: { text: string; line: number }[] = [];
  let fence: string | null = null;
  markdown.split('\n').forEach((text, i) => {
    const opening = /^ {0,3}(`{3,}|~{3,})/.exec(text);
    if (fence === null) {
      if (opening) fence = opening[1] as string;
      else lines.push({ text, line: i + 1 });
    } else if (opening && (opening[1] as string)[0] === fence[0] && (opening[1] as string).length >= fence.length && text.trim() === opening[1]) {
      fence = null;
    }
  });
  return lines;
}

/** A line without its code spans (a span's text is not markup). */
function withoutCode(text: string): string {
  return text.replace(/(`+)[\s\S]*?\1/g, '');
}

/** Every anchor a page offers: its headings' slugs, a repeated one suffixed -1, -2..., and explicit ones. */
export function anchorsOf(markdown: string): Set<string> {
  const anchors = new Set<string>();
  const occurrences = new Map<string, number>();
  for (const { text } of proseLines(markdown)) {
    const heading = /^ {0,3}#{1,6}[ \t]+(.*?)(?:[ \t]+#+)?[ \t]*$/.exec(text);
    if (heading) {
      const base = slug(heading[1] as string);
      let anchor = base;
      while (occurrences.has(anchor)) {
        const n = (occurrences.get(base) ?? 0) + 1;
        occurrences.set(base, n);
        anchor = `${base}-${n}`;
      }
      occurrences.set(anchor, 0);
      anchors.add(anchor);
    }
    for (const m of withoutCode(text).matchAll(/<a\s[^>]*\b(?:id|name)="([^"]+)"/g)) anchors.add(m[1] as string);
  }
  return anchors;
}

export interface Link {
  readonly target: string;
  readonly line: number;
}

/** Every link target of a page, with its line. */
export function linksOf(markdown: string): Link[] {
  const links: Link[] = [];
  for (const { text, line } of proseLines(markdown)) {
    const prose = withoutCode(text);
    for (const m of prose.matchAll(/!?\[(?:[^[\]]|\[[^\]]*\])*\]\(\s*<?([^\s)>]*)>?(?:\s+"[^"]*")?\s*\)/g)) links.push({ target: m[1] as string, line });
    const definition = /^ {0,3}\[[^\]]+\]:\s*<?([^\s>]+)>?/.exec(prose);
    if (definition) links.push({ target: definition[1] as string, line });
    for (const m of prose.matchAll(/\bhref="([^"]+)"/g)) links.push({ target: m[1] as string, line });
  }
  return links;
}

/** A target that leaves the repository: a scheme (https:, mailto:) or a host (//host/...). */
function isExternal(target: string): boolean {
  return /^[a-z][a-z0-9+.-]*:/i.test(target) || target.startsWith('//');
}

/**
 * The relative links of `files` (paths under `root`) that do not resolve, as `file:line: target:
 * why`: the file or folder they name is missing, or the anchor is not one of that page's. A path
 * starting with `/` is taken from `root`, as GitHub takes it from the repository's.
 */
export function brokenLinks(root: string, files: readonly string[]): { checked: number; broken: string[] } {
  const pages = new Map<string, Set<string>>();
  const anchors = (path: string) => {
    let found = pages.get(path);
    if (!found) {
      found = anchorsOf(readFileSync(path, 'utf8'));
      pages.set(path, found);
    }
    return found;
  };
  const broken: string[] = [];
  let checked = 0;
  for (const file of files) {
    const source = join(root, file);
    for (const { target, line } of linksOf(readFileSync(source, 'utf8'))) {
      if (target === '' || isExternal(target)) continue;
      checked++;
      const hash = target.indexOf('#');
      const path = decodeURIComponent(hash < 0 ? target : target.slice(0, hash));
      const fragment = hash < 0 ? null : decodeURIComponent(target.slice(hash + 1));
      const resolved = path === '' ? source : path.startsWith('/') ? join(root, path) : resolve(dirname(source), path);
      const where = `${file}:${line}: ${target}`;
      if (!existsSync(resolved)) {
        broken.push(`${where}: no ${relative(root, resolved) || '.'}`);
      } else if (fragment !== null) {
        if (!resolved.endsWith('.md')) broken.push(`${where}: an anchor into a file that is not Markdown`);
        else if (!anchors(resolved).has(fragment)) broken.push(`${where}: ${relative(root, resolved)} has no anchor #${fragment}`);
      }
    }
  }
  return { checked, broken };
}
