import type { Command } from 'commander';

export function registerLayerCommands(_program: Command): void {
  // filled in by the layer CLI work
}
