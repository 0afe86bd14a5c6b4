/**
 * A server-sent-events parser for the record, with its memory capped as data arrives. It keeps one
 * partial line and one event's `data:` lines; a line or an event past `maxChars` stops the parser
 * (it never buffers more), and `overflow` says so: the proxy has passed every byte to the agent
 * already, and records the call as truncated. Only `data:` fields matter to the record; `event:`,
 * `id:`, `retry:` and comments are skipped (the payloads name their own types).
 */

/** How many characters one SSE line, or one event's data, may hold before the record stops, by default (16 Mi). */
export const DEFAULT_MAX_SSE_EVENT_CHARS = 16 * 1024 * 1024;

export class SseParser {
  private line = '';
  /** A CR ended the last chunk: an LF opening the next one belongs to it. */
  private afterCr = false;
  private data: string[] = [];
  private dataChars = 0;
  /** Set once a line or an event passed the cap; nothing more is parsed. */
  overflow = false;

  constructor(
    private readonly onData: (data: string) => void,
    readonly maxChars: number = DEFAULT_MAX_SSE_EVENT_CHARS,
  ) {}

  /** Feeds decoded text; lines split on CRLF, LF or CR, as the SSE specification says. */
  feed(text: string): void {
    if (this.overflow || text.length === 0) return;
    let start = this.afterCr && text.startsWith('\n') ? 1 : 0;
    this.afterCr = false;
    // The next CR and LF, each found once (a stream without CRs is not rescanned per line).
    let lf = text.indexOf('\n', start);
    let cr = text.indexOf('\r', start);
    while (start < text.length) {
      if (lf !== -1 && lf < start) lf = text.indexOf('\n', start);
      if (cr !== -1 && cr < start) cr = text.indexOf('\r', start);
      const end = cr === -1 ? lf : lf === -1 ? cr : Math.min(cr, lf);
      if (end === -1) {
        if (this.line.length + text.length - start > this.maxChars) return this.stop();
        this.line += text.slice(start);
        return;
      }
      if (this.line.length + end - start > this.maxChars) return this.stop();
      const line = this.line + text.slice(start, end);
      this.line = '';
      start = end + 1;
      if (end === cr) {
        if (start === text.length) this.afterCr = true;
        else if (text.charCodeAt(start) === 10) start += 1;
      }
      this.takeLine(line);
      if (this.overflow) return;
    }
  }

  /** The stream ended: an event not closed by a blank line is dropped, as the specification says. */
  end(): void {
    this.line = '';
    this.data = [];
  }

  private takeLine(line: string): void {
    if (line.length === 0) {
      if (this.data.length > 0) {
        const data = this.data.join('\n');
        this.data = [];
        this.dataChars = 0;
        this.onData(data);
      }
      return;
    }
    if (!line.startsWith('data')) return;
    const colon = line.indexOf(':');
    const field = colon === -1 ? line : line.slice(0, colon);
    if (field !== 'data') return;
    let value = colon === -1 ? '' : line.slice(colon + 1);
    if (value.startsWith(' ')) value = value.slice(1);
    this.dataChars += value.length + 1;
    if (this.dataChars > this.maxChars) return this.stop();
    this.data.push(value);
  }

  private stop(): void {
    this.overflow = true;
    this.line = '';
    this.data = [];
  }
}
