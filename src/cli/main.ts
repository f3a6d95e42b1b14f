import { Command, CommanderError } from 'commander';
import { registerLayerCommands } from './layer-command.js';
import { registerImageCommands } from './image-command.js';
import { registerServeCommand } from './serve-command.js';
import { registerStatusCommand } from './status-command.js';
import { registerCheckCommand } from './check-command.js';
import { registerDoctorCommand } from './doctor-command.js';
import { registerPinCommands } from './pin-command.js';
import { isStoreError } from '../util/errors.js';
import { versionLine } from './version.js';

const program = new Command('stargz-store')
  .description('Lazy-pulling Additional Layer Store for Podman and CRI-O (eStargz, zstd:chunked)')
  .version(versionLine(), '-V, --version', 'print the version and the Node it runs on')
  .showHelpAfterError()
  .exitOverride();

registerServeCommand(program);
registerLayerCommands(program);
registerImageCommands(program);
registerStatusCommand(program);
registerCheckCommand(program);
registerDoctorCommand(program);
registerPinCommands(program);

try {
  await program.parseAsync(process.argv);
} catch (err) {
  if (err instanceof CommanderError) {
    process.exitCode = err.exitCode;
  } else if (isStoreError(err)) {
    process.stderr.write(`stargz-store: ${err.code}: ${err.message}\n`);
    process.exitCode = 1;
  } else {
    process.stderr.write(
      `stargz-store: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`,
    );
    process.exitCode = 1;
  }
}
