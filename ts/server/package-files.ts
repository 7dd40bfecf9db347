/**
 * Files of the package the server reads at run time. Paths are relative to this module, which
 * sits two levels below the package root in every layout: ts/server/ in a checkout,
 * dist/server/ compiled, and dist/cli/bundle.js (scripts/build-bundle.ts) bundled — so it must
 * stay at this depth.
 */
export const PACKAGE_JSON = new URL("../../package.json", import.meta.url);

/** The chat page scripts/build-ui.ts writes. */
export const UI_PAGE = new URL("../../ui/build/index.html", import.meta.url);
