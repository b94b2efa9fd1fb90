export function SettingsPage(_p: { sub: string }) { return <main class="main" id="main">Settings</main>; }
