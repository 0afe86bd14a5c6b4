/**
 * A built script's or stylesheet's text made safe to carry inside its page's `<script>` / `<style>`
 * element (extension/webviewHtml.ts). Pure, so it is unit tested in plain Node.
 */

/**
 * The `<` of sequences that would end the element early (`</script`, `</style`) or change how its text is
 * parsed (`<!--`) is written `\x3C`, which is `<` to JavaScript wherever those can appear in minified code
 * (strings, template literals, regular expressions, with or without the `u` flag; comments), and `\3C ` to CSS
 * (strings, comments).
 */
export function inlineText(text: string, language: 'js' | 'css'): string {
  const lessThan = language === 'js' ? '\\x3C' : '\\3C ';
  return text.replace(/<(\/(?:script|style)|!--)/gi, `${lessThan}$1`);
}
