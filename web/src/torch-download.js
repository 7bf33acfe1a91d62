import { download } from './dom.js';

// The "PyTorch script" button's work, fetched on its first click: the export engine writes the
// script and its weights (engine-modules.js), and the page saves both files.

/**
 * The caller disables the button on the click; this enables it again when the export ends.
 * @param {{engine: import('./engine-client.js').EngineClient, button: HTMLButtonElement,
 *          config_text: string, stem: string, title: string, say: (text: string) => void}} job
 *   stem: the files' name; title: the script's (the preset the experiment matches, or '');
 *   say: the export's status line
 */
export async function download_torch({ engine, button, config_text, stem, title, say }) {
  say('Writing the PyTorch script and weights…');
  try {
    const bundle = await engine.export_torch(config_text, title);
    download(`${stem}.py`, bundle.script, 'text/x-python');
    const bytes = Uint8Array.from(atob(bundle.weights_base64), (c) => c.charCodeAt(0));
    download(`${stem}.safetensors`, new Blob([bytes], { type: 'application/octet-stream' }));
    say(`Saved ${stem}.py and ${stem}.safetensors: run python3 ${stem}.py ${stem}.safetensors`);
  } catch (e) {
    say(`Export failed: ${e.message}`);
  } finally {
    button.disabled = false;
  }
}
