export function LogsPage() { return <main class="main" id="main">Logs</main>; }
