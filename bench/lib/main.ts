import { fileURLToPath } from 'node:url';

/**
 * Runs `main` when the module at `moduleUrl` is the script node was started with (not when a test
 * imports it), then exits: 0 once it resolves, 1 with its error on stderr.
 */
export function runIfMain(moduleUrl: string, main: () => Promise<void>): void {
  if (process.argv[1] === undefined || fileURLToPath(moduleUrl) !== process.argv[1]) return;
  main().then(
    () => process.exit(0),
    (err: unknown) => {
      process.stderr.write(`bench: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
      process.exit(1);
    },
  );
}
