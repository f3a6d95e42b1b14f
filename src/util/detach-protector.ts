/**
 * Detach one throwaway ArrayBuffer, so V8 stops assuming that no ArrayBuffer is ever detached.
 *
 * V8 compiles typed-array reads without detach checks while no buffer of the process has been
 * detached (its "ArrayBufferDetaching" protector). The first detach throws away every function
 * optimised under that assumption. In the store that first detach is undici's HTTP parser growing
 * its WebAssembly memory for the first large response body, i.e. the first TOC fetch: the TOC
 * code the warm-up had just compiled (toc-reader.ts warmUpTocPipeline) was discarded in the middle
 * of the first lookup and compiled again while the client waited (measured with
 * --trace-deopt: "dependent property cell changed" for the scanner, the tree builder and URL).
 * Called once before the warm-up, the code it compiles stays valid. The checks it adds to
 * typed-array accesses cost nothing measurable.
 */
export function settleArrayBufferDetaching(): void {
  const ab = new ArrayBuffer(8);
  structuredClone(ab, { transfer: [ab] });
}
