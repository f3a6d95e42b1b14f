/**
 * Recording hooks for modules that must stay light (util/errors.ts is loaded by the credential helper,
 * which must start fast): no-ops until util/metrics.ts is loaded and replaces them.
 */
export const metricHooks = {
  verificationFailure: (_what: string): void => undefined,
};
