/**
 * The download rules that need no transfer: where a request may go (every outbound rule a row),
 * what a pasted URL means, what a file name becomes, which fields a request may carry.
 */
import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { firstProblem, isPrivateAddress, publicOnlyLookup, redirectTargetProblem } from '../../sidecar/src/downloads/hops.js'
import { requestFromUrl, requestProblem, sanitiseFilename } from '../../sidecar/src/downloads/sources.js'

describe('the first request goes only to the configured base', () => {
  const base = 'https://civitai.com'
  const rows: Array<[string, string, string | null]> = [
    ['the base itself', 'https://civitai.com/api/v1/model-versions/1', null],
    ['another host', 'https://evil.example/api/v1/model-versions/1', 'the first request may go only to the configured source'],
    ['the base host on another port', 'https://civitai.com:8443/x', 'the first request may go only to the configured source'],
    ['the base host over http', 'http://civitai.com/x', 'plain http is allowed only to this machine (127.0.0.1, ::1, localhost); use https'],
    ['a user name in the URL', 'https://me:pw@civitai.com/x', 'a URL may not carry a user name or password'],
    ['not a URL', 'civitai.com/x', 'not an absolute URL'],
  ]
  for (const [name, url, problem] of rows) it(name, () => assert.equal(firstProblem(url, base), problem))
  it('a loopback stand-in base over http is allowed (tests)', () => assert.equal(firstProblem('http://127.0.0.1:5000/x', 'http://127.0.0.1:5000'), null))
})

describe('a redirect target (allow_private_hosts off)', () => {
  const refused: Array<[string, RegExp]> = [
    ['http://cdn.example/x', /must go to https/],
    ['https://127.0.0.1/x', /private/],
    ['https://127.1/x', /private/],
    ['https://0x7f000001/x', /private/],
    ['https://2130706433/x', /private/],
    ['https://[::1]/x', /private/],
    ['https://[::ffff:127.0.0.1]/x', /private/],
    ['https://[::ffff:7f00:1]/x', /private/],
    ['https://[64:ff9b::7f00:1]/x', /private/],
    ['https://[::7f00:1]/x', /private/],
    ['https://[2002:7f00:1::1]/x', /private/],
    ['https://localhost/x', /this machine/],
    ['https://LOCALHOST./x', /this machine|private/],
    ['https://x.localhost/x', /this machine/],
    ['https://0.0.0.0/x', /private/],
    ['https://10.0.0.1/x', /private/],
    ['https://172.16.5.4/x', /private/],
    ['https://192.168.1.1/x', /private/],
    ['https://100.64.0.1/x', /private/],
    ['https://169.254.169.254/latest/meta-data', /private/],
    ['https://[fe80::1]/x', /private/],
    ['https://[fd12::1]/x', /private/],
    ['https://224.0.0.1/x', /private/],
    ['https://198.18.0.1/x', /private/],
    ['https://198.19.255.254/x', /private/],
    ['https://192.0.0.8/x', /private/],
    ['https://[fec0::1]/x', /private/],
    ['https://[100::1]/x', /private/],
    // Teredo (2001::/32) and IPv4-translated (::ffff:0:a.b.c.d): IPv4 behind a tunnel or a translator
    ['https://[2001:0:4136:e378:8000:63bf:3fff:fdd2]/x', /private/],
    ['https://[::ffff:0:7f00:1]/x', /private/],
    ['file:///etc/passwd', /scheme file/],
    ['ftp://cdn.example/x', /scheme ftp/],
    ['data:text/plain,hi', /scheme data/],
    ['https://user:pw@cdn.example/x', /user name or password/],
    ['/relative', /not an absolute URL/],
  ]
  for (const [url, problem] of refused) it(`refuses ${url}`, () => assert.match(redirectTargetProblem(url, false) ?? 'allowed', problem))
  for (const url of ['https://cdn.example/x?sig=1', 'https://8.8.8.8/x', 'https://[2606:4700::1]/x', 'https://198.20.0.1/x', 'https://[2001:4860::8888]/x']) it(`allows ${url}`, () => assert.equal(redirectTargetProblem(url, false), null))
  it('allow_private_hosts lets a loopback http stand-in through, never another scheme or credentials', () => {
    assert.equal(redirectTargetProblem('http://127.0.0.1:9/x', true), null)
    assert.match(redirectTargetProblem('file:///etc/passwd', true) ?? '', /scheme file/)
    assert.match(redirectTargetProblem('https://u:p@127.0.0.1/x', true) ?? '', /user name/)
  })
})

describe('a name is checked where it is connected to', () => {
  it('a name resolving to a loopback address is refused by the lookup', async () => {
    const err = await new Promise<NodeJS.ErrnoException | null>((resolve) => publicOnlyLookup('localhost', {}, (e) => resolve(e)))
    assert.equal(err?.code, 'EPRIVATEADDRESS')
  })
  const rows: Array<[string, boolean]> = [['127.0.0.1', true], ['::ffff:10.0.0.1', true], ['169.254.1.1', true], ['fe80::2', true], ['8.8.8.8', false], ['2606:4700::1', false]]
  for (const [address, private_] of rows) it(`${address} is ${private_ ? '' : 'not '}private`, () => assert.equal(isPrivateAddress(address), private_))
})

describe('what a user may paste', () => {
  const bases = { civitai: 'https://civitai.com', huggingface: 'https://huggingface.co' }
  const rows: Array<[string, unknown]> = [
    ['https://civitai.com/models/4201/realistic-vision?modelVersionId=130072', { source: 'civitai', model_version_id: 130072 }],
    ['https://civitai.com/models/4201', { source: 'civitai', model_id: 4201 }],
    ['https://civitai.com/api/download/models/130072', { source: 'civitai', model_version_id: 130072 }],
    // the URL behind Civitai's own download buttons names the file: kept, not the primary file
    ['https://civitai.com/api/download/models/128713?type=Model&format=SafeTensor&size=pruned&fp=fp16', { source: 'civitai', model_version_id: 128713, type: 'Model', format: 'SafeTensor', size: 'pruned', fp: 'fp16' }],
    ['https://civitai.com/api/download/models/128713?type=VAE&token=abc', { source: 'civitai', model_version_id: 128713, type: 'VAE' }],
    [`https://civitai.com/api/download/models/128713?fp=${'x'.repeat(65)}`, null],
    ['https://huggingface.co/stabilityai/sdxl-vae/blob/main/sdxl_vae.safetensors', { source: 'huggingface', repo_id: 'stabilityai/sdxl-vae', revision: 'main', filename: 'sdxl_vae.safetensors' }],
    ['https://huggingface.co/o/r/resolve/v1.0/sub/dir/m.safetensors?download=true', { source: 'huggingface', repo_id: 'o/r', revision: 'v1.0', filename: 'sub/dir/m.safetensors' }],
    ['https://huggingface.co/o/r', null],
    ['https://civitai.com/images/1', null],
    ['https://evil.example/models/1', null],
    ['javascript:alert(1)', null],
    ['https://huggingface.co/a/b/resolve/main/%E0%A4%A', null],
  ]
  for (const [url, expected] of rows) it(url, () => assert.deepEqual(requestFromUrl(url, bases), expected))
})

describe('a file name is sanitised', () => {
  const rows: Array<[string, string]> = [
    ['model.safetensors', 'model.safetensors'],
    ['../../etc/passwd', 'passwd'],
    ['..\\..\\win.ini', 'win.ini'],
    ['.hidden.safetensors', 'hidden.safetensors'],
    ['a<b>c:d"e|f?g*h.ckpt', 'a_b_c_d_e_f_g_h.ckpt'],
    ['line\nbreak.pt', 'line_break.pt'],
    ['..', ''],
    ['/', ''],
    [`${'x'.repeat(300)}.safetensors`, `${'x'.repeat(188)}.safetensors`],
    // file systems count bytes: 150 CJK characters are 450 bytes; cut between whole characters
    [`${'模'.repeat(150)}.safetensors`, `${'模'.repeat(62)}.safetensors`],
    // a cut that would split an emoji's surrogate pair leaves the whole emoji out
    [`${'a'.repeat(187)}😀${'x'.repeat(20)}.safetensors`, `${'a'.repeat(187)}.safetensors`],
    ['bad\ud800name.pt', 'bad_name.pt'],
    [`${'y'.repeat(250)}.${'e'.repeat(30)}`, 'y'.repeat(200)],
  ]
  for (const [raw, name] of rows) {
    it(JSON.stringify(raw.slice(0, 40)), () => {
      const got = sanitiseFilename(raw)
      assert.equal(got, name)
      assert.ok(Buffer.byteLength(got, 'utf8') <= 200 && !/\p{Surrogate}/u.test(got))
    })
  }
})

describe('a request\'s fields', () => {
  const rows: Array<[Record<string, unknown>, RegExp | null]> = [
    [{ source: 'civitai', model_version_id: 1 }, null],
    [{ source: 'civitai' }, /needs model_version_id/],
    [{ source: 'civitai', model_version_id: 1, filename: 'x' }, /huggingface field/],
    [{ source: 'huggingface', repo_id: 'o/r', filename: 'f.safetensors' }, null],
    [{ source: 'huggingface', repo_id: 'o/r', filename: 'f.safetensors', model_version_id: 3 }, /civitai field/],
    [{ source: 'huggingface', repo_id: '../r', filename: 'f' }, /owner\/name/],
    [{ source: 'huggingface', repo_id: 'o/r', filename: 'a/../../f' }, /file path/],
    [{ source: 'huggingface', repo_id: 'o/r', filename: 'f', subfolder: '..' }, /folder path/],
    [{ source: 'huggingface', repo_id: 'o/r', filename: 'f', revision: 'a/../b' }, /revision/],
  ]
  for (const [req, problem] of rows) {
    it(JSON.stringify(req), () => {
      const got = requestProblem(req as never)
      if (problem === null) assert.equal(got, null)
      else assert.match(got ?? '', problem)
    })
  }
})
