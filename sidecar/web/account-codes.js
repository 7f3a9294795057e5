// Backup codes, wherever they are shown (the MFA setup page, the account page): listed, copied
// in one go, and downloaded as a text file made in the page (a blob: link; nothing is sent).
import { $, copyText, el } from './common.js'

/** The text file's content: whose codes, for which server, how they are used. */
export function backupCodesText(codes, username) {
  return [
    `Backup codes for ${username} at ${location.host}`,
    `Made ${new Date().toISOString().slice(0, 16).replace('T', ' ')} UTC. Each code works once, in place of a code from your authenticator app.`,
    '',
    ...codes.map((code, i) => `${String(i + 1).padStart(2, ' ')}. ${code}`),
    '',
  ].join('\n')
}

/**
 * Fills `root` (an element holding `ol.codes`, a copy button, a download link and a status line,
 * found by their data-codes attribute) with `codes`.
 */
export function showBackupCodes(root, codes, username) {
  const list = $('[data-codes=list]', root)
  list.replaceChildren(...codes.map((code) => el('li', {}, code)))
  const text = backupCodesText(codes, username)
  let source = $('[data-codes=text]', root)
  if (!source) {
    source = el('pre', { hidden: true, dataset: { codes: 'text' } })
    list.after(source)
  }
  source.textContent = text
  const status = $('[data-codes=status]', root)
  status.hidden = true
  $('[data-codes=copy]', root).onclick = () => copyText(source, status)
  const link = $('[data-codes=download]', root)
  if (link.href.startsWith('blob:')) URL.revokeObjectURL(link.href)
  link.href = URL.createObjectURL(new Blob([text], { type: 'text/plain;charset=utf-8' }))
  link.download = `backup-codes-${username}-${location.hostname}.txt`
}
