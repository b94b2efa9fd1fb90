export function Logo(p: { small?: boolean }) {
  return (
    <div class={`logo ${p.small ? "logo-sm" : ""}`}>
      <svg width={p.small ? 22 : 30} height={p.small ? 22 : 30} viewBox="0 0 32 32" aria-hidden="true">
        <rect x="2" y="2" width="28" height="28" rx="8" fill="var(--accent)" />
        <path d="M11 9h11v3.2h-7.4v3.3h6.4v3.2h-6.4V24H11z" fill="#fff" />
      </svg>
      <span>Ferrobase</span>
    </div>
  );
}
