export function PluginsPage() { return <main class="main" id="main">Plugins</main>; }
