// /loading: a holding page while ComfyUI starts. It goes on to `next` (a same-origin path) or
// `/` as soon as the service answers, and to the login page when there is no session.
import { $, api, SESSION_ENDED } from './common.js'

const raw = new URLSearchParams(location.search).get('next') || '/'
const next = raw.startsWith('/') && !raw.startsWith('//') && !raw.startsWith('/\\') ? raw : '/'
$('#continue').href = next

api('/authsvc/api/me')
  .then(() => location.replace(next))
  .catch((error) => {
    if (error.status === 401 && SESSION_ENDED.has(error.code)) location.replace(`/login?next=${encodeURIComponent(next)}`)
    else $('#status').textContent = `${error.message} You can try the link below.`
  })
