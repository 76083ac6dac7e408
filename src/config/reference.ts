/**
 * The generated sections of the docs: the configuration reference (docs/configuration.md), one row
 * per key path, from the schema that validates the file; and the error codes (docs/errors.md), from
 * the registry in errors.ts. Generated, so that the documentation cannot drift from what the
 * gateway accepts (test/config/reference.test.ts). `npm run docs` rewrites both.
 */
import { ERROR_CODES } from '../errors.js';
import { ConfigSchema } from './schema.js';

/** The part of JSON schema the configuration schema uses. */
interface JsonSchema {
  type?: string;
  properties?: Record<string, JsonSchema>;
  required?: readonly string[];
  items?: JsonSchema;
  enum?: readonly unknown[];
  const?: unknown;
  anyOf?: readonly JsonSchema[];
  pattern?: string;
  minimum?: number;
  maximum?: number;
  minLength?: number;
  minItems?: number;
  default?: unknown;
  description?: string;
}

export const SECTIONS = {
  config: { start: '<!-- config-reference:start -->', end: '<!-- config-reference:end -->' },
  errors: { start: '<!-- error-codes:start -->', end: '<!-- error-codes:end -->' },
} as const;

export type SectionName = keyof typeof SECTIONS;

const generated = (source: string) =>
  `Generated from \`${source}\` by \`npm run docs\`: edit the source, not this table.`;

/** One Markdown table row per leaf key (`store.commandTimeoutMs`, `replicas[].id`), and one per list of entries. */
export function configReference(schema: unknown = ConfigSchema): string {
  const rows: string[] = [];
  walk(schema as JsonSchema, '', true, rows);
  return [generated('src/config/schema.ts'), '', '| Key | Type | Default | Description |', '|---|---|---|---|', ...rows].join('\n');
}

/** What the error codes' table needs of a registry entry. */
export interface CodeRow {
  readonly meaning: string;
  readonly status?: number;
  readonly rpc?: number | string;
  readonly stream?: boolean;
}

/** One row per code: raised errors have no status; answers give their HTTP status and JSON-RPC code. */
export function errorCodeReference(codes: Readonly<Record<string, CodeRow>> = ERROR_CODES): string {
  const rows = Object.entries(codes).map(([code, row]) => {
    const status = row.status === undefined ? '(raised, not an answer)' : row.stream ? `${row.status} (in a stream)` : String(row.status);
    const rpc = row.rpc === undefined ? '' : `\`${row.rpc}\``;
    return `| \`${code}\` | ${status} | ${rpc} | ${cell(row.meaning)} |`;
  });
  return [generated('src/errors.ts'), '', '| Code | HTTP status | JSON-RPC | Meaning |', '|---|---|---|---|', ...rows].join('\n');
}

export function generatedSection(name: SectionName): string {
  return name === 'config' ? configReference() : errorCodeReference();
}

/** The text between a section's markers; an error naming the marker when one is missing. */
export function sectionOf(text: string, name: SectionName): string {
  const { start, end } = markers(text, name);
  return text.slice(start, end);
}

/** The text with a section's content replaced (markers kept, one newline inside each). */
export function replaceSection(text: string, name: SectionName, content: string): string {
  const { start, end } = markers(text, name);
  return `${text.slice(0, start)}\n${content}\n${text.slice(end)}`;
}

function markers(text: string, name: SectionName): { start: number; end: number } {
  const { start, end } = SECTIONS[name];
  const from = text.indexOf(start);
  const to = text.indexOf(end, from < 0 ? 0 : from);
  if (from < 0 || to < 0) {
    throw new Error(`missing marker ${from < 0 ? start : end}: the ${name} section must sit between ${start} and ${end}`);
  }
  return { start: from + start.length, end: to };
}

function walk(schema: JsonSchema, path: string, required: boolean, rows: string[]): void {
  if (schema.type === 'object' && schema.properties) {
    for (const [key, child] of Object.entries(schema.properties)) {
      walk(child, path ? `${path}.${key}` : key, schema.required?.includes(key) ?? false, rows);
    }
    return;
  }
  if (schema.type === 'array' && schema.items?.type === 'object') {
    rows.push(row(path, schema, required));
    walk(schema.items, `${path}[]`, true, rows);
    return;
  }
  rows.push(row(path, schema, required));
}

function row(path: string, schema: JsonSchema, required: boolean): string {
  const def = schema.default !== undefined ? `\`${JSON.stringify(schema.default)}\`` : required ? 'required' : 'unset';
  return `| \`${path}\` | ${cell(typeOf(schema))} | ${cell(def)} | ${cell(schema.description ?? '')} |`;
}

function typeOf(schema: JsonSchema): string {
  if (schema.anyOf) return schema.anyOf.map(typeOf).join(' or ');
  if (schema.const !== undefined) return `\`${String(schema.const)}\``;
  if (schema.enum) return schema.enum.map((v) => `\`${String(v)}\``).join(' \\| ');
  if (schema.type === 'array') {
    const items = schema.items?.type === 'object' ? 'entries below' : typeOf(schema.items ?? {});
    const min = schema.minItems !== undefined ? `, at least ${schema.minItems}` : '';
    return `list of ${items}${min}`;
  }
  const limits: string[] = [];
  if (schema.pattern !== undefined) limits.push(`matching \`${schema.pattern}\``);
  if (schema.minLength !== undefined) limits.push(schema.minLength === 1 ? 'not empty' : `at least ${schema.minLength} characters`);
  if (schema.minimum !== undefined && schema.maximum !== undefined) limits.push(`${schema.minimum} to ${schema.maximum}`);
  else if (schema.minimum !== undefined) limits.push(`at least ${schema.minimum}`);
  else if (schema.maximum !== undefined) limits.push(`at most ${schema.maximum}`);
  const base = schema.type ?? 'any';
  return limits.length > 0 ? `${base}, ${limits.join(', ')}` : base;
}

/** A table cell: pipes escaped (also inside code spans, as GitHub requires), no line breaks. */
function cell(text: string): string {
  return text.replace(/(?<!\\)\|/g, '\\|').replace(/\s*\n\s*/g, ' ');
}
