import type { Command } from 'commander';

export function registerImageCommands(_program: Command): void {
  // filled in by the image CLI work
}
