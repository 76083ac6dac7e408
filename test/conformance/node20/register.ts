/** `node --import …/register.js conformance …` runs the conformance CLI on Node 20 (hooks.ts). */
import { register } from 'node:module';

register('./hooks.js', import.meta.url);
