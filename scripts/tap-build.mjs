#!/usr/bin/env node
// tap builds its test class with the plugins that package.json names ("!@tapjs/typescript": the
// tests run compiled JavaScript) the first time it runs after an install, but that first run still
// starts every test file with the loaders it was installed with, ts-node's among them: about 1.5 s
// of CPU per file. Build it before the run when the built plugins are not the configured ones.
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { TapConfig } from '@tapjs/config';
import { signature } from '@tapjs/test';

const config = await TapConfig.load();
if (config.pluginSignature !== signature) {
  const { status, signal, error } = spawnSync(process.execPath, [fileURLToPath(new URL('../node_modules/.bin/tap', import.meta.url)), 'build'], { stdio: 'inherit' });
  if (status !== 0) {
    console.error(`tap build failed (${error?.message ?? signal ?? `exit ${status}`})`);
    process.exit(1);
  }
}
