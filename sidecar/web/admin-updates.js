// The admin panel's update line: what the service's last background check learned
// (GET /authsvc/api/update-status; the check itself never runs on a page's request).
import { $, api } from './common.js'

const line = $('#update-status')

api('/authsvc/api/update-status', { sessionPage: true })
  .then(({ data }) => {
    if (data.mode === 'offline') line.textContent = `authsvc ${data.current_version}. The update check is offline (no source configured, or it could not be reached).`
    else if (data.update_available) line.textContent = `authsvc ${data.latest_version} is available; this server runs ${data.current_version}.`
    else line.textContent = `authsvc ${data.current_version} is up to date (latest: ${data.latest_version}).`
    line.dataset.mode = data.mode
    line.hidden = false
  })
  .catch((error) => {
    line.textContent = `Update status unavailable: ${error.message}`
    line.hidden = false
  })
