import type { Command } from 'commander';

export function registerServeCommand(_program: Command): void {
  // filled in by the store work
}
