/**
 * The daemon's logger: JSON lines on stderr (stdout carries only the ready line). Values of our own
 * log fields named like credentials are replaced, and every string field is scrubbed of secret
 * values (protocol/secrets.ts) before it is written; prompt bodies are never logged.
 */
import { isCredentialKey, scrubMessage } from './protocol/secrets';

export type LogLevel = 'debug' | 'info' | 'warn' | 'error';

const LEVELS: Record<LogLevel, number> = { debug: 10, info: 20, warn: 30, error: 40 };

export interface Logger {
  debug(msg: string, fields?: Record<string, unknown>): void;
  info(msg: string, fields?: Record<string, unknown>): void;
  warn(msg: string, fields?: Record<string, unknown>): void;
  error(msg: string, fields?: Record<string, unknown>): void;
  child(component: string): Logger;
}

export function redact(fields: Record<string, unknown>): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(fields)) {
    if (isCredentialKey(key)) out[key] = '[redacted]';
    else if (value instanceof Error) out[key] = { name: value.name, message: scrubMessage(value.message) };
    else if (typeof value === 'string') out[key] = scrubMessage(value);
    else out[key] = value;
  }
  return out;
}

export function createLogger(
  component: string,
  options: { level?: LogLevel; write?: (line: string) => void } = {},
): Logger {
  const min =
    LEVELS[options.level ?? (process.env.LIGHTNING_LOG_LEVEL as LogLevel | undefined) ?? 'info'] ?? LEVELS.info;
  const write = options.write ?? ((line: string) => process.stderr.write(line));
  const emit = (level: LogLevel, msg: string, fields?: Record<string, unknown>): void => {
    if (LEVELS[level] < min) return;
    const record = { t: new Date().toISOString(), level, component, msg, ...(fields ? redact(fields) : {}) };
    write(`${JSON.stringify(record)}\n`);
  };
  return {
    debug: (msg, fields) => emit('debug', msg, fields),
    info: (msg, fields) => emit('info', msg, fields),
    warn: (msg, fields) => emit('warn', msg, fields),
    error: (msg, fields) => emit('error', msg, fields),
    child: (sub) => createLogger(`${component}.${sub}`, options),
  };
}

/** For library use and tests that don't want output. */
export const silentLogger: Logger = {
  debug: () => {},
  info: () => {},
  warn: () => {},
  error: () => {},
  child: () => silentLogger,
};
