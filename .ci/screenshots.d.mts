/** The e2e picture of the installed VSIX → its name in media/screenshots/ (.ci/screenshots.mjs). */
export declare const PICTURES: Readonly<Record<string, string>>;
