/**
 * Module resolution hooks for the conformance CLI on Node 20 (registered by register.ts with
 * `node --import`): its `fs` is ./fs.js.
 */
const FS = new URL('./fs.js', import.meta.url).href;

interface ResolveContext {
  parentURL?: string;
}
type NextResolve = (specifier: string, context: ResolveContext) => Promise<{ url: string }>;

export async function resolve(specifier: string, context: ResolveContext, next: NextResolve): Promise<{ url: string; shortCircuit?: boolean }> {
  if ((specifier === 'fs' || specifier === 'node:fs') && context.parentURL?.includes('/@modelcontextprotocol/conformance/') === true) {
    return { url: FS, shortCircuit: true };
  }
  return next(specifier, context);
}
