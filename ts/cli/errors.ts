/** Failures the user can fix: main.ts prints the message as one line and exits 1. */
export class CliError extends Error {}

/** An error answer of the Wick server, with its HTTP status (404: no such model). */
export class ApiError extends CliError {
  constructor(
    message: string,
    readonly status: number,
  ) {
    super(message);
  }
}
