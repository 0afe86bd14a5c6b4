/** Ends a switch over a discriminated union: a new kind that is not handled fails to compile. */
export function assertNever(value: never): never {
  throw new Error(`unexpected value: ${JSON.stringify(value)}`);
}
