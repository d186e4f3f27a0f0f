// csp.mjs - the page's Content-Security-Policy allows its one inline script
// by hash. After editing that script, `node tests/web/csp.mjs` writes the new
// hash into web/index.html (the browser tests fail until it matches).
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
export const PAGE = path.resolve(here, '../../web/index.html');

// the hash of the text between <script> and </script>, as the browser takes it
export function scriptHash(html) {
	const m = /<script>([\s\S]*?)<\/script>/.exec(html);
	if (!m) throw new Error('no inline <script> in the page');
	return "'sha256-" + crypto.createHash('sha256').update(m[1], 'utf8').digest('base64') + "'";
}

export function policyHash(html) {
	const m = /http-equiv="Content-Security-Policy" content="[^"]*script-src ('sha256-[A-Za-z0-9+/=]+')/.exec(html);
	return m ? m[1] : null;
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
	const html = fs.readFileSync(PAGE, 'utf8');
	const want = scriptHash(html), have = policyHash(html);
	if (!have) throw new Error('no script-src hash in the page\'s Content-Security-Policy');
	if (want === have) {
		console.log('csp: hash up to date');
	} else {
		fs.writeFileSync(PAGE, html.replace(have, want));
		console.log(`csp: ${have} -> ${want}`);
	}
}
