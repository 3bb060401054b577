// Set by build.mjs (esbuild `define`): true in test builds (those that bundle a test model), false
// in release builds, where the code behind it is left out of the bundle.
declare const __HEARTH_TEST_BUILD__: boolean;
