/**
 * What the conformance scenarios ask a server to answer (each scenario's "Server Implementation
 * Requirements"), as plain data: the two conformance servers (SDK v1 for the 2025 era, SDK v2 for
 * 2026-07-28) return these so that both eras are held to the same fixtures.
 */

/** A 1×1 red PNG. */
export const PNG_BASE64 =
  'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==';

/** A WAV header with no samples: the smallest valid audio/wav. */
export const WAV_BASE64 = Buffer.concat([
  Buffer.from('RIFF'),
  u32(36),
  Buffer.from('WAVEfmt '),
  u32(16),
  u16(1),
  u16(1),
  u32(8000),
  u32(8000),
  u16(1),
  u16(8),
  Buffer.from('data'),
  u32(0),
]).toString('base64');

function u32(n: number): Buffer {
  const b = Buffer.alloc(4);
  b.writeUInt32LE(n);
  return b;
}
function u16(n: number): Buffer {
  const b = Buffer.alloc(2);
  b.writeUInt16LE(n);
  return b;
}

export const text = (value: string) => ({ type: 'text' as const, text: value });
export const image = () => ({ type: 'image' as const, data: PNG_BASE64, mimeType: 'image/png' });

/** Tool results that need nothing from the era: name → [description, result]. */
export const STATIC_TOOLS = {
  test_simple_text: ['returns simple text', { content: [text('This is a simple text response for testing.')] }],
  test_image_content: ['returns an image', { content: [image()] }],
  test_audio_content: ['returns audio', { content: [{ type: 'audio' as const, data: WAV_BASE64, mimeType: 'audio/wav' }] }],
  test_embedded_resource: [
    'returns an embedded resource',
    {
      content: [
        { type: 'resource' as const, resource: { uri: 'test://embedded-resource', mimeType: 'text/plain', text: 'This is an embedded resource content.' } },
      ],
    },
  ],
  test_multiple_content_types: [
    'returns text, an image and a resource',
    {
      content: [
        text('Multiple content types test:'),
        image(),
        {
          type: 'resource' as const,
          resource: { uri: 'test://mixed-content-resource', mimeType: 'application/json', text: JSON.stringify({ test: 'data', value: 123 }) },
        },
      ],
    },
  ],
  test_error_handling: ['always fails', { isError: true, content: [text('This tool intentionally returns an error for testing')] }],
} as const;

export const STATIC_TEXT = { uri: 'test://static-text', mimeType: 'text/plain', text: 'This is the content of the static text resource.' };
export const STATIC_BINARY = { uri: 'test://static-binary', mimeType: 'image/png', blob: PNG_BASE64 };
export const TEMPLATE = 'test://template/{id}/data';
export const templateContents = (uri: string, id: string) => ({
  uri,
  mimeType: 'application/json',
  text: JSON.stringify({ id, templateTest: true, data: `Data for ID: ${id}` }),
});

export const simplePrompt = () => ({ messages: [{ role: 'user' as const, content: text('This is a simple prompt for testing.') }] });
export const promptWithArguments = (arg1: string, arg2: string) => ({
  messages: [{ role: 'user' as const, content: text(`Prompt with arguments: arg1='${arg1}', arg2='${arg2}'`) }],
});
export const promptWithResource = (uri: string) => ({
  messages: [
    { role: 'user' as const, content: { type: 'resource' as const, resource: { uri, mimeType: 'text/plain', text: 'Embedded resource content for testing.' } } },
    { role: 'user' as const, content: text('Please process the embedded resource above.') },
  ],
});
export const promptWithImage = () => ({
  messages: [
    { role: 'user' as const, content: image() },
    { role: 'user' as const, content: text('Please analyze the image above.') },
  ],
});

/** completion/complete for test_prompt_with_arguments. */
export const completeArg = (value: string): string[] => ['paris', 'park', 'party'].filter((word) => word.startsWith(value));

/** The progress tool's steps: 0, 50, 100 of 100, about 50 ms apart. */
export const PROGRESS_STEPS = [0, 50, 100];
export const STEP_MS = 50;
