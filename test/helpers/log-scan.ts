/**
 * Looks for secrets in log lines the way an attacker reading the log would: not only in the text,
 * but in every field decoded every way a value can hide bytes (a byte array, a Buffer's JSON, a
 * base64, base64url, hex or percent-encoded string, JSON inside a string), at any depth.
 */

/** Where each secret was found: `line N at path (decoded as ...)`. Empty when none. */
export function findSecrets(lines: readonly string[], secrets: readonly string[]): string[] {
  const found: string[] = [];
  lines.forEach((line, i) => {
    const report = (where: string) => found.push(`line ${i + 1} ${where}: ${line.slice(0, 200)}`);
    scanText(line, '(raw line)', secrets, report);
    let value: unknown;
    try {
      value = JSON.parse(line);
    } catch {
      return;
    }
    walk(value, '$', secrets, report, 0);
  });
  return found;
}

const MAX_DEPTH = 12;

function walk(value: unknown, path: string, secrets: readonly string[], report: (where: string) => void, depth: number): void {
  if (depth > MAX_DEPTH) return;
  if (typeof value === 'string') {
    for (const [how, text] of decodings(value)) {
      scanText(text, `${path} (${how})`, secrets, report);
      // JSON inside a string (a logged body, a serialized error) is walked as well.
      if (how === 'as is' && /^\s*[[{]/.test(text)) {
        try {
          walk(JSON.parse(text), `${path}<json>`, secrets, report, depth + 1);
        } catch {
          // not JSON after all
        }
      }
    }
    return;
  }
  if (Array.isArray(value)) {
    if (value.length > 0 && value.every((n) => Number.isInteger(n) && (n as number) >= 0 && (n as number) <= 255)) {
      const bytes = Buffer.from(value as number[]);
      scanText(bytes.toString('latin1'), `${path} (byte array)`, secrets, report);
      scanText(bytes.toString('utf8'), `${path} (byte array, utf8)`, secrets, report);
    }
    value.forEach((item, i) => walk(item, `${path}[${i}]`, secrets, report, depth + 1));
    return;
  }
  if (value !== null && typeof value === 'object') {
    for (const [key, child] of Object.entries(value)) {
      scanText(key, `${path} (key)`, secrets, report);
      walk(child, `${path}.${key}`, secrets, report, depth + 1);
    }
  }
}

function decodings(text: string): [string, string][] {
  const out: [string, string][] = [['as is', text]];
  if (text.length >= 8 && /^[A-Za-z0-9+/_-]+={0,2}$/.test(text)) {
    const bytes = Buffer.from(text.replace(/-/g, '+').replace(/_/g, '/'), 'base64');
    out.push(['base64', bytes.toString('latin1')], ['base64, utf8', bytes.toString('utf8')]);
  }
  if (text.length >= 8 && /^(?:[0-9a-fA-F]{2})+$/.test(text)) out.push(['hex', Buffer.from(text, 'hex').toString('latin1')]);
  if (text.includes('%')) {
    try {
      out.push(['percent-decoded', decodeURIComponent(text)]);
    } catch {
      // not percent-encoded
    }
  }
  // Escapes that survive JSON.parse of an already escaped value.
  if (text.includes('\\')) out.push(['unescaped', text.replace(/\\u([0-9a-fA-F]{4})/g, (_, hex: string) => String.fromCharCode(parseInt(hex, 16))).replace(/\\(.)/g, '$1')]);
  return out;
}

function scanText(text: string, where: string, secrets: readonly string[], report: (where: string) => void): void {
  for (const secret of secrets) if (text.includes(secret)) report(`${where} holds ${JSON.stringify(secret.slice(0, 6))}…`);
}
