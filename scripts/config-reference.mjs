#!/usr/bin/env node
/**
 * The generated sections of the docs, from the compiled schema and error registry (run `npm run build`
 * first). The logic lives in src/config/reference.ts, where it is typed and tested.
 *
 *   node scripts/config-reference.mjs                       print every section, markers included
 *   node scripts/config-reference.mjs --write FILE [...]    replace, in each FILE, the sections it holds
 *
 * `npm run docs` writes docs/configuration.md (the configuration reference) and docs/errors.md (the
 * error codes). A file that holds no section's markers is an error: the section it was meant to hold
 * has moved, or the file is not the one meant.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { parseArgs } from 'node:util';

const USAGE = 'usage: node scripts/config-reference.mjs [--write FILE]...';

async function main() {
  let values;
  try {
    ({ values } = parseArgs({ options: { write: { type: 'string', multiple: true }, help: { type: 'boolean', short: 'h' } } }));
  } catch (err) {
    process.stderr.write(`${err.message}\n${USAGE}\n`);
    return 2;
  }
  if (values.help) {
    process.stdout.write(`${USAGE}\n`);
    return 0;
  }
  let reference;
  try {
    reference = await import(new URL('../dist/config/reference.js', import.meta.url).href);
  } catch (err) {
    process.stderr.write(`cannot load dist/config/reference.js (run npm run build first): ${err.message}\n`);
    return 1;
  }
  const { SECTIONS, generatedSection, replaceSection } = reference;
  const names = Object.keys(SECTIONS);

  if (values.write === undefined) {
    const blocks = names.map((name) => `${SECTIONS[name].start}\n${generatedSection(name)}\n${SECTIONS[name].end}\n`);
    process.stdout.write(blocks.join('\n'));
    return 0;
  }

  // Every file is read and checked before any is written: a bad one leaves them all as they were.
  const updates = [];
  for (const file of values.write) {
    let text;
    try {
      text = readFileSync(file, 'utf8');
    } catch (err) {
      process.stderr.write(`${file}: cannot read: ${err.message}\n`);
      return 1;
    }
    // A section is the file's when either of its markers is there; replaceSection names the other if it is missing.
    const held = names.filter((name) => text.includes(SECTIONS[name].start) || text.includes(SECTIONS[name].end));
    if (held.length === 0) {
      const markers = names.map((name) => SECTIONS[name].start).join(', ');
      process.stderr.write(`${file}: holds no generated section (markers ${markers})\n`);
      return 1;
    }
    try {
      for (const name of held) text = replaceSection(text, name, generatedSection(name));
    } catch (err) {
      process.stderr.write(`${file}: ${err.message}\n`);
      return 1;
    }
    updates.push({ file, text, held });
  }
  for (const { file, text, held } of updates) {
    writeFileSync(file, text);
    process.stdout.write(`${file}: wrote ${held.join(', ')} section${held.length > 1 ? 's' : ''}\n`);
  }
  return 0;
}

process.exitCode = await main();
