#!/usr/bin/env node
/**
 * The README's generated sections, from the compiled schema and error registry (run `npm run build`
 * first). The logic lives in src/config/reference.ts, where it is typed and tested.
 *
 *   node scripts/config-reference.mjs                    print both sections, markers included
 *   node scripts/config-reference.mjs --write README.md  replace both sections in the file
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { parseArgs } from 'node:util';

const USAGE = 'usage: node scripts/config-reference.mjs [--write FILE]';

async function main() {
  let values;
  try {
    ({ values } = parseArgs({ options: { write: { type: 'string' }, help: { type: 'boolean', short: 'h' } } }));
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

  const file = values.write;
  let text;
  try {
    text = readFileSync(file, 'utf8');
  } catch (err) {
    process.stderr.write(`${file}: cannot read: ${err.message}\n`);
    return 1;
  }
  try {
    for (const name of names) text = replaceSection(text, name, generatedSection(name));
  } catch (err) {
    process.stderr.write(`${file}: ${err.message}\n`);
    return 1;
  }
  writeFileSync(file, text);
  process.stdout.write(`${file}: wrote ${names.join(', ')} sections\n`);
  return 0;
}

process.exitCode = await main();
