// The account page's storage block: the caller's own folders on the host and what is in them
// (POST /authsvc/api/user-env {"action":"status"}); read only.
import { $, api, say, size } from './common.js'

const files = (n) => `${n} ${n === 1 ? 'file' : 'files'}`

api('/authsvc/api/user-env', { method: 'POST', body: { action: 'status' }, sessionPage: true })
  .then(({ data }) => {
    $('#storage-workflows').textContent = `${data.workflows.count} (${size(data.workflows.bytes)})`
    for (const folder of data.folders) {
      $(`#storage-${folder.kind}`).textContent = folder.state === 'folder' ? `${files(folder.files)}, ${size(folder.bytes)}${data.truncated ? ' or more' : ''}` : 'none yet'
    }
    $('#storage').dataset.ready = 'true'
  })
  .catch((error) => say($('#storage-error'), error.message))
