/** The bearer tokens auth-replica-main.ts accepts, and the user each belongs to. */
export const AUTH_TOKENS: Readonly<Record<string, string>> = {
  'alice-token-1': 'alice',
  /** Alice's token after a refresh: another value, the same user. */
  'alice-token-2': 'alice',
  'bob-token-1': 'bob',
};
