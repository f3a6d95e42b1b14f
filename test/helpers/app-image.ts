import { assembleImage, buildTestLayer, makeTar, type BuiltImage, type LayerKind } from './store.js';

/**
 * A one-layer image holding `/app/<name>` for each of `files` (the `app/` directory entry first),
 * as the store's integration tests read it through the mount.
 */
export async function appImage(
  files: Record<string, Buffer | string>,
  kind: LayerKind = 'estargz',
): Promise<BuiltImage> {
  const tar = await makeTar([
    { name: 'app/', type: 'directory' },
    ...Object.entries(files).map(([name, content]) => ({ name: `app/${name}`, content })),
  ]);
  return assembleImage([await buildTestLayer(tar, kind)]);
}
